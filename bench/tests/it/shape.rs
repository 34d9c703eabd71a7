//! The shape gate (issue 20): every production source file of the
//! workspace, parsed with `syn` and measured.
//!
//! Production means the files the crates' module trees reach from their
//! roots (`src/lib.rs`, `src/main.rs`, `src/bin/*.rs`, `build.rs`) through
//! `mod` declarations, leaving out every item under `#[cfg(test)]` (test
//! modules, and the files only they reach) and everything under `tests/`.
//!
//! The rules:
//! - no function over [`FN_LINES_MAX`] lines, except the tables of data in
//!   [`TABLES_OF_DATA`] (each with its reason);
//! - at most [`FNS_LONG_MAX`] functions over [`FN_LINES_LONG`] lines;
//! - no file over [`FILE_LINES_MAX`] lines (its tests left out);
//! - no import cycle between files. An edge goes from a file to the file
//!   that defines what a `crate::`, `super::` or `self::` path names (in a
//!   `use` or anywhere in the code): the deepest module file the path
//!   walks through, following `use` re-exports to the file that defines
//!   the item. Each cycle is reported with its files.
//!
//! A function's length runs from the line of its `fn` to the line of its
//! closing brace.
//!
//! While the workspace is being reshaped the bounds are a ratchet: they
//! start at the counts when the gate landed and only ever go down, to the
//! targets written beside them; [`KNOWN_CYCLES`] may only lose entries.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use syn::spanned::Spanned;
use syn::visit::Visit;

/// A function longer than this is refused, unless it is a table of data.
const FN_LINES_MAX: usize = 80;
/// Functions longer than this are counted against [`FNS_LONG_MAX`].
const FN_LINES_LONG: usize = 50;
/// Functions over [`FN_LINES_LONG`] lines, at most. Ratchet: the count
/// at the last tightening; the target is 10.
const FNS_LONG_MAX: usize = 3;
/// Functions over [`FN_LINES_MAX`] lines outside [`TABLES_OF_DATA`], at
/// most. Ratchet: the count at the last tightening; the target is 0.
const FNS_OVER_MAX: usize = 0;
/// A production file longer than this is refused.
const FILE_LINES_MAX: usize = 800;
/// Files over [`FILE_LINES_MAX`] lines, at most. Ratchet: the count when
/// the gate landed; the target is 0.
const FILES_OVER_MAX: usize = 0;

/// Functions allowed past [`FN_LINES_MAX`] because they are tables of
/// data, not logic: `file::function`, and why.
const TABLES_OF_DATA: &[(&str, &str)] = &[];

/// Import cycles between files that existed when the gate landed, each as
/// its files. Target: none (reached). A cycle found must lie within one of
/// these.
const KNOWN_CYCLES: &[&[&str]] = &[];

/// A `.rs` file this gate reads, at most this many per crate.
const FILES_PER_CRATE_MAX: usize = 2_000;
/// Re-exports followed when resolving one path, at most.
const REEXPORT_HOPS_MAX: usize = 8;

#[test]
fn production_code_keeps_its_shape() -> Result<(), Box<dyn std::error::Error>> {
    let root = workspace_root();
    let tree = Tree::read(&root)?;
    let shape = Shape::measure(&tree);
    let problems = shape.problems();
    eprintln!("{}", shape.summary());
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    Ok(())
}

#[test]
fn the_gate_sees_cycles_long_functions_and_test_code() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let src = dir.path().join("toy/src");
    std::fs::create_dir_all(src.join("b"))?;
    std::fs::write(
        dir.path().join("toy/Cargo.toml"),
        "[package]\nname = \"toy\"\n",
    )?;
    let long_body = "    let _ = 1;\n".repeat(FN_LINES_MAX);
    let files = [
        (
            "lib.rs",
            "mod a;\nmod b;\n#[cfg(test)]\nmod t;\n".to_owned(),
        ),
        (
            "a.rs",
            format!("use crate::b::Thing;\npub fn long() {{\n{long_body}}}\n"),
        ),
        ("b/mod.rs", "pub mod c;\npub use c::Thing;\n".to_owned()),
        (
            "b/c.rs",
            "pub struct Thing;\npub fn f() { super::super::a::long(); }\n".to_owned(),
        ),
        ("t.rs", format!("fn in_tests() {{\n{long_body}}}\n")),
    ];
    for (name, text) in files {
        std::fs::write(src.join(name), text)?;
    }
    let tree = Tree::read(dir.path())?;
    let shape = Shape::measure(&tree);
    let names: Vec<&str> = tree.files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(
        names,
        [
            "toy/src/lib.rs",
            "toy/src/a.rs",
            "toy/src/b/mod.rs",
            "toy/src/b/c.rs"
        ]
    );
    let long: Vec<(&str, usize)> = shape
        .functions
        .iter()
        .map(|f| (f.key.as_str(), f.lines))
        .collect();
    assert_eq!(long, [("toy/src/a.rs::long", FN_LINES_MAX + 2)]);
    // a.rs -> b/c.rs (through b's re-export), b/c.rs -> a.rs.
    assert_eq!(
        shape.cycles,
        [vec!["toy/src/a.rs".to_owned(), "toy/src/b/c.rs".to_owned()]]
    );
    Ok(())
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the scenarios crate sits in the workspace")
        .to_owned()
}

/// One production source file.
struct SourceFile {
    /// Relative to the workspace root, with `/`.
    path: String,
    krate: usize,
    /// Its module path within its crate (empty for a crate root).
    module: Vec<String>,
    syntax: syn::File,
    lines: usize,
}

/// Every production file of every crate, and the modules they define.
struct Tree {
    files: Vec<SourceFile>,
    /// (crate, module path) → the file that defines the module (an inline
    /// module maps to the file holding it).
    modules: BTreeMap<(usize, Vec<String>), usize>,
    /// (crate, module path) → name → the absolute path a `use` there
    /// brings the name in from.
    uses: BTreeMap<(usize, Vec<String>), BTreeMap<String, Vec<String>>>,
}

impl Tree {
    fn read(root: &Path) -> Result<Self, Box<dyn std::error::Error>> {
        let mut tree = Tree {
            files: Vec::new(),
            modules: BTreeMap::new(),
            uses: BTreeMap::new(),
        };
        for (krate, crate_root) in crate_roots(root)?.into_iter().enumerate() {
            let mut per_crate = 0;
            tree.read_file(root, krate, &crate_root, Vec::new(), &mut per_crate)?;
        }
        Ok(tree)
    }

    /// Reads `path` as module `module`, then every file its `mod`
    /// declarations reach.
    fn read_file(
        &mut self,
        root: &Path,
        krate: usize,
        path: &Path,
        module: Vec<String>,
        per_crate: &mut usize,
    ) -> Result<(), Box<dyn std::error::Error>> {
        *per_crate += 1;
        assert!(
            *per_crate <= FILES_PER_CRATE_MAX,
            "too many files under {}",
            path.display()
        );
        let text = std::fs::read_to_string(path)?;
        let syntax =
            syn::parse_file(&text).map_err(|e| format!("{}: cannot parse: {e}", path.display()))?;
        let index = self.files.len();
        let relative = path
            .strip_prefix(root)?
            .to_string_lossy()
            .replace('\\', "/");
        let children_dir = children_dir(path);
        let mut children = Vec::new();
        self.index_items(
            krate,
            index,
            &module,
            &syntax.items,
            &children_dir,
            &mut children,
        );
        self.files.push(SourceFile {
            path: relative,
            krate,
            module,
            syntax,
            lines: text.lines().count(),
        });
        for (child_module, child_path) in children {
            self.read_file(root, krate, &child_path, child_module, per_crate)?;
        }
        Ok(())
    }

    /// Records the modules and uses of `items` (module `module` of file
    /// `file`), and collects the files its `mod` declarations name.
    fn index_items(
        &mut self,
        krate: usize,
        file: usize,
        module: &[String],
        items: &[syn::Item],
        dir: &Path,
        children: &mut Vec<(Vec<String>, PathBuf)>,
    ) {
        self.modules.insert((krate, module.to_vec()), file);
        for item in items.iter().filter(|i| !is_test(attrs_of(i))) {
            match item {
                syn::Item::Mod(m) => {
                    let mut child = module.to_vec();
                    child.push(m.ident.to_string());
                    match &m.content {
                        Some((_, inner)) => {
                            let inner_dir = dir.join(m.ident.to_string());
                            self.index_items(krate, file, &child, inner, &inner_dir, children);
                        }
                        None => children.push((child, module_file(dir, m))),
                    }
                }
                syn::Item::Use(u) => {
                    let mut found = Vec::new();
                    use_paths(&u.tree, &mut Vec::new(), &mut found);
                    let is_child = |first: &str| {
                        items
                            .iter()
                            .any(|i| matches!(i, syn::Item::Mod(m) if m.ident == first))
                    };
                    let resolved: Vec<(String, Vec<String>)> = found
                        .into_iter()
                        .filter_map(|(name, path)| Some((name, absolute(module, &path, is_child)?)))
                        .collect();
                    self.uses
                        .entry((krate, module.to_vec()))
                        .or_default()
                        .extend(resolved);
                }
                _ => {}
            }
        }
    }

    /// The file that defines what the absolute path `path` of crate
    /// `krate` names.
    fn resolve(&self, krate: usize, path: &[String], hops: usize) -> Option<usize> {
        let mut module: Vec<String> = Vec::new();
        for (index, segment) in path.iter().enumerate() {
            let mut deeper = module.clone();
            deeper.push(segment.clone());
            if self.modules.contains_key(&(krate, deeper.clone())) {
                module = deeper;
                continue;
            }
            let reexported = self
                .uses
                .get(&(krate, module.clone()))
                .and_then(|uses| uses.get(segment));
            if let Some(target) = reexported
                && hops < REEXPORT_HOPS_MAX
            {
                let mut followed = target.clone();
                followed.extend(path[index + 1..].iter().cloned());
                return self.resolve(krate, &followed, hops + 1);
            }
            break;
        }
        self.modules.get(&(krate, module)).copied()
    }
}

/// The crate roots under `root`: for each directory with a `Cargo.toml`
/// and a `src/`, its `src/lib.rs`, `src/main.rs`, `src/bin/*.rs` and
/// `build.rs`. Each is a crate of its own.
fn crate_roots(root: &Path) -> Result<Vec<PathBuf>, Box<dyn std::error::Error>> {
    let mut manifests = Vec::new();
    find_manifests(root, root, &mut manifests)?;
    manifests.sort();
    let mut roots = Vec::new();
    for dir in manifests {
        let src = dir.join("src");
        for candidate in [
            src.join("lib.rs"),
            src.join("main.rs"),
            dir.join("build.rs"),
        ] {
            if candidate.is_file() {
                roots.push(candidate);
            }
        }
        if let Ok(bins) = std::fs::read_dir(src.join("bin")) {
            let mut bins: Vec<PathBuf> = bins
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "rs"))
                .collect();
            bins.sort();
            roots.extend(bins);
        }
    }
    Ok(roots)
}

/// Directories under `dir` (not target/, tests/ or hidden ones) with a
/// `Cargo.toml` and a `src/`.
fn find_manifests(
    root: &Path,
    dir: &Path,
    found: &mut Vec<PathBuf>,
) -> Result<(), Box<dyn std::error::Error>> {
    if dir.join("Cargo.toml").is_file() && dir.join("src").is_dir() {
        found.push(dir.to_owned());
    }
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let skipped =
            name.starts_with('.') || ["target", "tests", "src", "node_modules"].contains(&name);
        if path.is_dir()
            && !skipped
            && path
                .strip_prefix(root)
                .is_ok_and(|p| p.components().count() <= 3)
        {
            find_manifests(root, &path, found)?;
        }
    }
    Ok(())
}

/// Where the `mod` declarations of the file at `path` look for files.
fn children_dir(path: &Path) -> PathBuf {
    let parent = path.parent().unwrap_or(Path::new("")).to_owned();
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default();
    let is_mod_rs = ["lib", "main", "mod", "build"].contains(&stem)
        || parent.file_name().is_some_and(|n| n == "bin");
    if is_mod_rs { parent } else { parent.join(stem) }
}

/// The file of `mod name;` declared with children in `dir`.
fn module_file(dir: &Path, m: &syn::ItemMod) -> PathBuf {
    let explicit = m.attrs.iter().find_map(|a| match &a.meta {
        syn::Meta::NameValue(nv) if nv.path.is_ident("path") => match &nv.value {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            }) => Some(s.value()),
            _ => None,
        },
        _ => None,
    });
    if let Some(path) = explicit {
        return dir.join(path);
    }
    let flat = dir.join(format!("{}.rs", m.ident));
    if flat.is_file() {
        flat
    } else {
        dir.join(m.ident.to_string()).join("mod.rs")
    }
}

/// Every name a `use` tree brings in, with the path it comes from.
fn use_paths(
    tree: &syn::UseTree,
    prefix: &mut Vec<String>,
    found: &mut Vec<(String, Vec<String>)>,
) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            use_paths(&p.tree, prefix, found);
            prefix.pop();
        }
        syn::UseTree::Name(n) => {
            let mut path = prefix.clone();
            path.push(n.ident.to_string());
            found.push((n.ident.to_string(), path));
        }
        syn::UseTree::Rename(r) => {
            let mut path = prefix.clone();
            path.push(r.ident.to_string());
            found.push((r.rename.to_string(), path));
        }
        // A glob names the module itself.
        syn::UseTree::Glob(_) => found.push(("*".to_owned(), prefix.clone())),
        syn::UseTree::Group(g) => {
            for tree in &g.items {
                use_paths(tree, prefix, found);
            }
        }
    }
}

/// `path`, written in module `module`, as a path from the crate root:
/// `crate::`, `self::` and `super::` paths, and (for re-exports) paths
/// that start with a child module (`is_child`). `None` for other crates.
fn absolute(
    module: &[String],
    path: &[String],
    is_child: impl Fn(&str) -> bool,
) -> Option<Vec<String>> {
    let first = path.first()?;
    let (mut base, rest) = match first.as_str() {
        "crate" => (Vec::new(), &path[1..]),
        "self" => (module.to_vec(), &path[1..]),
        "super" => {
            let mut base = module.to_vec();
            let mut rest = path;
            // Bounded: by the path's length.
            while rest.first().is_some_and(|s| s == "super") {
                base.pop()?;
                rest = &rest[1..];
            }
            (base, rest)
        }
        name if is_child(name) => (module.to_vec(), path),
        _ => return None,
    };
    base.extend(rest.iter().cloned());
    Some(base)
}

fn attrs_of(item: &syn::Item) -> &[syn::Attribute] {
    match item {
        syn::Item::Const(i) => &i.attrs,
        syn::Item::Enum(i) => &i.attrs,
        syn::Item::ExternCrate(i) => &i.attrs,
        syn::Item::Fn(i) => &i.attrs,
        syn::Item::ForeignMod(i) => &i.attrs,
        syn::Item::Impl(i) => &i.attrs,
        syn::Item::Macro(i) => &i.attrs,
        syn::Item::Mod(i) => &i.attrs,
        syn::Item::Static(i) => &i.attrs,
        syn::Item::Struct(i) => &i.attrs,
        syn::Item::Trait(i) => &i.attrs,
        syn::Item::TraitAlias(i) => &i.attrs,
        syn::Item::Type(i) => &i.attrs,
        syn::Item::Union(i) => &i.attrs,
        syn::Item::Use(i) => &i.attrs,
        _ => &[],
    }
}

/// Whether the attributes put the item under `#[cfg(test)]` (or a `cfg`
/// that needs `test`, like `all(test, unix)`).
fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.parse_args::<syn::Meta>()
                .is_ok_and(|meta| needs_test(&meta))
    })
}

fn needs_test(meta: &syn::Meta) -> bool {
    match meta {
        syn::Meta::Path(p) => p.is_ident("test"),
        syn::Meta::List(list) => {
            let inner = list.parse_args_with(
                syn::punctuated::Punctuated::<syn::Meta, syn::Token![,]>::parse_terminated,
            );
            let Ok(inner) = inner else { return false };
            if list.path.is_ident("all") {
                inner.iter().any(needs_test)
            } else if list.path.is_ident("any") {
                !inner.is_empty() && inner.iter().all(needs_test)
            } else {
                false
            }
        }
        syn::Meta::NameValue(_) => false,
    }
}

/// One function over [`FN_LINES_LONG`] lines.
struct LongFunction {
    /// `file::name`.
    key: String,
    line: usize,
    lines: usize,
}

/// What the gate measured.
struct Shape {
    functions: Vec<LongFunction>,
    /// (production lines, file) of files over [`FILE_LINES_MAX`].
    files: Vec<(usize, String)>,
    /// Each cycle's files, sorted.
    cycles: Vec<Vec<String>>,
}

impl Shape {
    fn measure(tree: &Tree) -> Self {
        let mut functions = Vec::new();
        let mut files = Vec::new();
        let mut edges: BTreeMap<usize, BTreeSet<usize>> = BTreeMap::new();
        for (index, file) in tree.files.iter().enumerate() {
            let mut visitor = FileVisitor {
                tree,
                file,
                module: file.module.clone(),
                functions: Vec::new(),
                edges: BTreeSet::new(),
                test_lines: 0,
            };
            visitor.visit_file(&file.syntax);
            functions.extend(visitor.functions);
            edges
                .entry(index)
                .or_default()
                .extend(visitor.edges.into_iter().filter(|t| *t != index));
            let lines = file.lines - visitor.test_lines;
            if lines > FILE_LINES_MAX {
                files.push((lines, file.path.clone()));
            }
        }
        functions.sort_by(|a, b| b.lines.cmp(&a.lines).then(a.key.cmp(&b.key)));
        files.sort_by(|a, b| b.cmp(a));
        let cycles = strongly_connected(tree.files.len(), &edges)
            .into_iter()
            .filter(|c| c.len() > 1)
            .map(|c| {
                let mut names: Vec<String> =
                    c.iter().map(|i| tree.files[*i].path.clone()).collect();
                names.sort();
                names
            })
            .collect();
        Shape {
            functions,
            files,
            cycles,
        }
    }

    fn over_max(&self) -> Vec<&LongFunction> {
        self.functions
            .iter()
            .filter(|f| {
                f.lines > FN_LINES_MAX && !TABLES_OF_DATA.iter().any(|(key, _)| *key == f.key)
            })
            .collect()
    }

    fn summary(&self) -> String {
        let mut out = format!(
            "shape: {} functions over {FN_LINES_LONG} lines (bound {FNS_LONG_MAX}, target 10), \
             {} over {FN_LINES_MAX} outside the tables of data (bound {FNS_OVER_MAX}, target 0), \
             {} files over {FILE_LINES_MAX} lines (bound {FILES_OVER_MAX}, target 0), {} import cycles\n",
            self.functions.len(),
            self.over_max().len(),
            self.files.len(),
            self.cycles.len()
        );
        for f in &self.functions {
            out.push_str(&format!("  {:5} {} (line {})\n", f.lines, f.key, f.line));
        }
        for (lines, file) in &self.files {
            out.push_str(&format!("  file {lines:5} {file}\n"));
        }
        for cycle in &self.cycles {
            out.push_str(&format!("  cycle: {}\n", cycle.join(" <-> ")));
        }
        out
    }

    fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.functions.len() > FNS_LONG_MAX {
            problems.push(format!(
                "{} functions are over {FN_LINES_LONG} lines; at most {FNS_LONG_MAX} may be (the list is above)",
                self.functions.len()
            ));
        }
        let over = self.over_max();
        if over.len() > FNS_OVER_MAX {
            problems.push(format!(
                "{} functions are over {FN_LINES_MAX} lines outside the tables of data; at most {FNS_OVER_MAX} may be:\n{}",
                over.len(),
                over.iter().map(|f| format!("  {} {}", f.lines, f.key)).collect::<Vec<_>>().join("\n")
            ));
        }
        for (key, _) in TABLES_OF_DATA {
            if !self
                .functions
                .iter()
                .any(|f| f.key == *key && f.lines > FN_LINES_MAX)
            {
                problems.push(format!(
                    "{key} is no longer over {FN_LINES_MAX} lines: take it off TABLES_OF_DATA"
                ));
            }
        }
        if self.files.len() > FILES_OVER_MAX {
            problems.push(format!(
                "{} files are over {FILE_LINES_MAX} lines; at most {FILES_OVER_MAX} may be",
                self.files.len()
            ));
        }
        for cycle in &self.cycles {
            let known = KNOWN_CYCLES
                .iter()
                .any(|k| cycle.iter().all(|f| k.contains(&f.as_str())));
            if !known {
                problems.push(format!(
                    "an import cycle between files: {}",
                    cycle.join(" <-> ")
                ));
            }
        }
        for known in KNOWN_CYCLES {
            let still = self
                .cycles
                .iter()
                .any(|c| c.iter().all(|f| known.contains(&f.as_str())));
            if !still {
                problems.push(format!(
                    "the cycle {} is gone: take it off KNOWN_CYCLES",
                    known.join(" <-> ")
                ));
            }
        }
        problems
    }
}

/// Measures one file: its functions, its edges, its test lines.
struct FileVisitor<'a> {
    tree: &'a Tree,
    file: &'a SourceFile,
    /// The module the visitor is in (inline modules push onto it).
    module: Vec<String>,
    functions: Vec<LongFunction>,
    edges: BTreeSet<usize>,
    /// Lines of items under `#[cfg(test)]`.
    test_lines: usize,
}

impl FileVisitor<'_> {
    fn function(&mut self, name: &syn::Ident, fn_token: &syn::Token![fn], block: &syn::Block) {
        let first = fn_token.span.start().line;
        let last = block.brace_token.span.close().end().line;
        let lines = last - first + 1;
        if lines > FN_LINES_LONG {
            self.functions.push(LongFunction {
                key: format!("{}::{name}", self.file.path),
                line: first,
                lines,
            });
        }
    }

    /// Whether `attrs` make the item test code; if so its lines are
    /// counted out of the file.
    fn skipped(&mut self, attrs: &[syn::Attribute], span: proc_macro2::Span) -> bool {
        let test = is_test(attrs);
        if test {
            self.test_lines += span.end().line - span.start().line + 1;
        }
        test
    }

    fn edge(&mut self, segments: &[String]) {
        if segments.len() < 2 || !["crate", "self", "super"].contains(&segments[0].as_str()) {
            return;
        }
        if let Some(path) = absolute(&self.module, segments, |_| false)
            && let Some(target) = self.tree.resolve(self.file.krate, &path, 0)
        {
            self.edges.insert(target);
        }
    }
}

impl<'ast> Visit<'ast> for FileVisitor<'_> {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        if self.skipped(attrs_of(item), item.span()) {
            return;
        }
        syn::visit::visit_item(self, item);
    }

    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        self.module.push(m.ident.to_string());
        syn::visit::visit_item_mod(self, m);
        self.module.pop();
    }

    fn visit_impl_item(&mut self, item: &'ast syn::ImplItem) {
        let attrs = match item {
            syn::ImplItem::Const(i) => &i.attrs,
            syn::ImplItem::Fn(i) => &i.attrs,
            syn::ImplItem::Type(i) => &i.attrs,
            syn::ImplItem::Macro(i) => &i.attrs,
            _ => return,
        };
        if !self.skipped(attrs, item.span()) {
            syn::visit::visit_impl_item(self, item);
        }
    }

    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        self.function(&f.sig.ident, &f.sig.fn_token, &f.block);
        syn::visit::visit_item_fn(self, f);
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        self.function(&f.sig.ident, &f.sig.fn_token, &f.block);
        syn::visit::visit_impl_item_fn(self, f);
    }

    fn visit_trait_item_fn(&mut self, f: &'ast syn::TraitItemFn) {
        if let Some(block) = &f.default {
            self.function(&f.sig.ident, &f.sig.fn_token, block);
        }
        syn::visit::visit_trait_item_fn(self, f);
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        let mut found = Vec::new();
        use_paths(&u.tree, &mut Vec::new(), &mut found);
        for (_, path) in found {
            self.edge(&path);
        }
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
        self.edge(&segments);
        syn::visit::visit_path(self, path);
    }

    /// `pub(in crate::x)` names where an item may be seen, not what it uses.
    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {}
}

/// Tarjan's strongly connected components of the graph `0..nodes`.
fn strongly_connected(nodes: usize, edges: &BTreeMap<usize, BTreeSet<usize>>) -> Vec<Vec<usize>> {
    struct Walk<'a> {
        edges: &'a BTreeMap<usize, BTreeSet<usize>>,
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        components: Vec<Vec<usize>>,
    }
    impl Walk<'_> {
        fn connect(&mut self, v: usize) {
            self.index[v] = Some(self.next);
            self.low[v] = self.next;
            self.next += 1;
            self.stack.push(v);
            self.on_stack[v] = true;
            let targets: Vec<usize> = self.edges.get(&v).into_iter().flatten().copied().collect();
            for w in targets {
                match self.index[w] {
                    None => {
                        self.connect(w);
                        self.low[v] = self.low[v].min(self.low[w]);
                    }
                    Some(index) if self.on_stack[w] => self.low[v] = self.low[v].min(index),
                    Some(_) => {}
                }
            }
            if Some(self.low[v]) == self.index[v] {
                let mut component = Vec::new();
                // Bounded: pops at most every node once.
                while let Some(w) = self.stack.pop() {
                    self.on_stack[w] = false;
                    component.push(w);
                    if w == v {
                        break;
                    }
                }
                self.components.push(component);
            }
        }
    }
    let mut walk = Walk {
        edges,
        index: vec![None; nodes],
        low: vec![0; nodes],
        on_stack: vec![false; nodes],
        stack: Vec::new(),
        next: 0,
        components: Vec::new(),
    };
    for v in 0..nodes {
        if walk.index[v].is_none() {
            walk.connect(v);
        }
    }
    walk.components
}
