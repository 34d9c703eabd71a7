mod certify;
mod fragile;
