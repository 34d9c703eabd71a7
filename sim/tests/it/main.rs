mod certify;
mod fragile;
mod oracle;
