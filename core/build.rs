//! Stamps the build with the git commit it was built from, and whether the
//! tree was dirty (see `src/stamp.rs`): a seed reproduces a run only on the
//! same code. vergen-gitcl asks git; outside a git checkout it falls back on
//! `.cargo_vcs_info.json`, and failing that leaves the commit unknown.

use vergen_gitcl::{Emitter, Gitcl};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let git = Gitcl::builder()
        .sha(false)
        .dirty(false)
        .vcs_info_fallback(true)
        .build();
    Emitter::default().add_instructions(&git)?.emit()?;
    // vergen runs this again when HEAD moves; the dirty flag also needs a
    // fresh look when the sources this package is built from change.
    for path in [
        "src",
        "migrations",
        "contracts",
        "openapi.json",
        "Cargo.toml",
        "../Cargo.lock",
    ] {
        println!("cargo:rerun-if-changed={path}");
    }
    Ok(())
}
