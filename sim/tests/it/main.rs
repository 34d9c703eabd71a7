mod fragile;
mod oracle;
