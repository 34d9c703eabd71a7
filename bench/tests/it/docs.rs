//! The docs point at what exists. Every path a Markdown file of the
//! repository names (in backticks or as a link) must name a file or folder
//! of the repository, and neither the docs nor any comment of the code may
//! name a file outside it (a file on someone's machine, or a folder of
//! one's home); the system's own folders (`/usr/...`, `/proc/...`) are
//! named as they are everywhere.
//!
//! A path names something when it is a file or folder from the repository's
//! root, or the end of one (`store/mod.rs`, read in its crate's section of
//! a doc), or a glob (`catalog/*.toml`) that matches one. Build outputs
//! (`target/...`), what a command's example writes and notations such as
//! `i/n` are not read as paths: a token is one when it names a Rust file, or
//! has a folder in it and either starts at one of the repository's own top
//! folders, ends in a file name with an extension, or ends with `/`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Folders never read: build output and git's own.
const SKIPPED_DIRS: &[&str] = &["target", ".git"];
/// Files read, at most (a bound on the walk).
const FILES_MAX: usize = 20_000;
/// Extensions whose comments are read for paths outside the repository.
const COMMENTED: &[(&str, &str)] = &[
    ("rs", "//"),
    ("sh", "#"),
    ("py", "#"),
    ("toml", "#"),
    ("yml", "#"),
    ("yaml", "#"),
];
/// The first folders of an absolute path that every machine has.
const SYSTEM_DIRS: &[&str] = &[
    "bin", "dev", "etc", "lib", "lib64", "opt", "proc", "run", "sbin", "sys", "tmp", "usr", "var",
];
/// The first folders of an absolute path that is someone's own.
const OWN_DIRS: &[&str] = &[
    "home",
    "media",
    "mnt",
    "root",
    "srv",
    "Users",
    "work",
    "workspace",
];

/// Every file and folder of the repository below `root`, relative to it.
fn tree(root: &Path) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut pending = vec![PathBuf::new()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(root.join(&dir)) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let relative = dir.join(&name);
            let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
            if is_dir && SKIPPED_DIRS.contains(&name.as_str()) {
                continue;
            }
            found.insert(relative.to_string_lossy().replace('\\', "/"));
            if is_dir {
                pending.push(relative);
            }
            assert!(found.len() < FILES_MAX, "more than {FILES_MAX} files");
        }
    }
    found
}

/// Whether `pattern` (with `*` for any run of characters within one
/// folder's name) matches `path`.
fn glob(pattern: &str, path: &str) -> bool {
    let (pattern, path): (Vec<&str>, Vec<&str>) =
        (pattern.split('/').collect(), path.split('/').collect());
    pattern.len() == path.len()
        && pattern.iter().zip(&path).all(|(p, s)| {
            let parts: Vec<&str> = p.split('*').collect();
            let [first, .., last] = parts.as_slice() else {
                return p == s;
            };
            let mut rest = match s.strip_prefix(first) {
                Some(rest) => rest,
                None => return false,
            };
            for middle in &parts[1..parts.len() - 1] {
                match rest.find(middle) {
                    Some(at) => rest = &rest[at + middle.len()..],
                    None => return false,
                }
            }
            rest.ends_with(last)
        })
}

/// Whether `path` names something of `tree`.
fn names_something(path: &str, tree: &BTreeSet<String>) -> bool {
    let path = path.trim_end_matches('/');
    let depth = path.split('/').count();
    tree.iter().any(|file| {
        let segments: Vec<&str> = file.split('/').collect();
        let Some(start) = segments.len().checked_sub(depth) else {
            return false;
        };
        let end = segments[start..].join("/");
        end == path || glob(path, &end)
    })
}

/// The path-like tokens of a doc's line: what backticks hold and what
/// links point at, split on white space.
fn doc_tokens(line: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    for (i, part) in line.split('`').enumerate() {
        if i % 2 == 1 {
            tokens.extend(part.split_whitespace().map(str::to_owned));
        }
    }
    for part in line.split("](").skip(1) {
        if let Some(target) = part.split(')').next() {
            tokens.push(target.split('#').next().unwrap_or_default().to_owned());
        }
    }
    tokens
        .into_iter()
        .map(|t| {
            t.trim_matches(|c: char| matches!(c, '(' | ')' | ',' | ';' | ':' | '"' | '\''))
                .to_owned()
        })
        .collect()
}

/// Whether a doc's token is meant as a path of the repository, whose top
/// folders and files are `top`.
fn is_repository_path(token: &str, top: &BTreeSet<&str>) -> bool {
    let plain = token
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "._-/*".contains(c));
    let last = token
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or_default();
    let first = token.split('/').next().unwrap_or_default();
    let looks = token.ends_with(".rs")
        || (token.contains('/')
            && (top.contains(first) || has_extension(last) || token.ends_with('/')));
    plain
        && looks
        && !token.starts_with('/')
        && !token.starts_with("target/")
        && !token.starts_with("./")
        && !token.starts_with("../")
        && token.chars().any(|c| c.is_ascii_alphabetic())
}

/// Whether a file name has an extension (`a.rs`; not `...`).
fn has_extension(name: &str) -> bool {
    name.rsplit_once('.').is_some_and(|(stem, extension)| {
        !stem.is_empty()
            && !extension.is_empty()
            && extension.chars().all(|c| c.is_ascii_alphanumeric())
    })
}

/// The absolute paths `text` names outside the system's own folders.
fn outside(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (at, _) in text.match_indices('/') {
        let before = text[..at].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || ".:_-~/$<>{}*".contains(c)) {
            continue;
        }
        let path: String = text[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || "._-/".contains(*c))
            .collect();
        let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        let (Some(first), Some(last), true) =
            (segments.first(), segments.last(), segments.len() > 1)
        else {
            continue;
        };
        let a_file = has_extension(last) && !SYSTEM_DIRS.contains(first);
        if a_file || OWN_DIRS.contains(first) {
            found.push(path);
        }
    }
    found
}

/// What is wrong with the docs and comments under `root`.
fn problems(root: &Path) -> Vec<String> {
    let tree = tree(root);
    let top: BTreeSet<&str> = tree
        .iter()
        .filter(|f| !f.contains('/'))
        .map(String::as_str)
        .collect();
    let mut problems = Vec::new();
    for file in &tree {
        let extension = file.rsplit('.').next().unwrap_or_default();
        let Ok(text) = std::fs::read_to_string(root.join(file)) else {
            continue;
        };
        let comment = COMMENTED
            .iter()
            .find(|(ext, _)| *ext == extension)
            .map(|(_, marker)| *marker);
        for (number, line) in text.lines().enumerate() {
            let at = format!("{file}:{}", number + 1);
            if extension == "md" {
                for token in doc_tokens(line) {
                    if is_repository_path(&token, &top) && !names_something(&token, &tree) {
                        problems.push(format!("{at}: `{token}` names nothing in the repository"));
                    }
                }
                for path in outside(line) {
                    problems.push(format!("{at}: {path} is outside the repository"));
                }
            } else if let Some(marker) = comment
                && let Some((_, said)) = line.split_once(marker)
            {
                for path in outside(said) {
                    problems.push(format!(
                        "{at}: a comment names {path}, outside the repository"
                    ));
                }
            }
        }
    }
    problems
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace holds the crate")
        .to_path_buf()
}

#[test]
fn docs_name_only_what_exists_and_nothing_outside_the_repository() {
    let problems = problems(&workspace_root());
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// One case of the rules: a tree of `files` (path, text) and the problems
/// it must have.
fn check(files: &[(&str, &str)], expected: &[&str]) {
    let expected: Vec<String> = expected.iter().map(|e| (*e).to_owned()).collect();
    let dir = tempfile::tempdir().expect("a temporary directory");
    for (path, text) in files {
        let path = dir.path().join(path);
        std::fs::create_dir_all(path.parent().expect("a folder")).expect("folders");
        std::fs::write(path, text).expect("writes");
    }
    assert_eq!(problems(dir.path()), expected, "{files:?}");
}

#[test]
fn the_rules_catch_a_path_gone_and_a_path_outside() {
    // Written in pieces, so that this file names nothing outside itself.
    let outside = |parts: &[&str]| format!("/{}", parts.join("/"));
    let (tool, own) = (
        outside(&["work", "tools", "fnlen.py"]),
        outside(&["home", "me", "x.rs"]),
    );
    let shape = format!("//! as `{tool}` counts it\nlet a = 1; // {own}\n");
    let code = ("core/src/store/mod.rs", "// see `core/src/store/mod.rs`\n");
    let catalogue = (
        "scenarios/catalog/a.toml",
        "# /usr/lib/postgresql is fine\n",
    );
    check(
        &[
            code,
            catalogue,
            (
                "README.md",
                "`store/mod.rs`, [cat](scenarios/catalog/*.toml), `sweep.json`, `/v1/jobs`, \
                 `target/release/idem`, `i/n`, the pointer `/params/text`\n",
            ),
        ],
        &[],
    );
    check(
        &[code, ("ARCHITECTURE.md", "`store/pg.rs` and `quiet.rs`\n")],
        &[
            "ARCHITECTURE.md:1: `store/pg.rs` names nothing in the repository",
            "ARCHITECTURE.md:1: `quiet.rs` names nothing in the repository",
        ],
    );
    check(
        &[("scenarios/tests/it/shape.rs", &shape)],
        &[
            &format!(
                "scenarios/tests/it/shape.rs:1: a comment names {tool}, outside the repository"
            ),
            &format!(
                "scenarios/tests/it/shape.rs:2: a comment names {own}, outside the repository"
            ),
        ],
    );
}
