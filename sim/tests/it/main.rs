mod fragile;
mod oracle;
mod oracle_explore;
