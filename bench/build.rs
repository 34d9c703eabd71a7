//! Stamps the `idem` build with the git commit it was built from, and
//! whether the tree was dirty (see `idem_model::stamp`): every output that
//! names a seed names the build too, since a seed reproduces a run only on
//! the same code.

use vergen_gitcl::{Emitter, Gitcl};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let git = Gitcl::builder()
        .sha(false)
        .dirty(false)
        .vcs_info_fallback(true)
        .build();
    Emitter::default().add_instructions(&git)?.emit()?;
    // `idem` is built from the whole workspace: look again at the dirty
    // flag whenever any of it changes (it is rebuilt then anyway).
    for path in [
        "src",
        "Cargo.toml",
        "../scenarios/src",
        "../scenarios/catalog",
        "../scenarios/regressions",
        "../scenarios/Cargo.toml",
        "../real/src",
        "../real/Cargo.toml",
        "../core/src",
        "../core/migrations",
        "../core/Cargo.toml",
        "../sim/src",
        "../sim/Cargo.toml",
        "../sim/oracle/src",
        "../sim/oracle/Cargo.toml",
        "../core/model/src",
        "../core/model/Cargo.toml",
        "../reports/src",
        "../reports/Cargo.toml",
        "../Cargo.toml",
        "../Cargo.lock",
    ] {
        println!("cargo:rerun-if-changed={path}");
    }
    Ok(())
}
