//! `idem`: the command line. Thin by design; everything it does lives in
//! the library so that tests can drive it.

fn main() -> std::process::ExitCode {
    idem_bench::cli::main()
}
