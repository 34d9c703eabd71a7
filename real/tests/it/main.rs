//! Integration tests of idem-real: the users' script against real TCP
//! (the same requests as in the simulator), and the PostgreSQL create path
//! against pgbench. Real mode end to end (`idem real`) is tested where the
//! `idem` command is built: idem-bench's tests/it/real.rs.

mod pgbench;
mod same_script;
