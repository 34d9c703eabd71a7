//! The templates the HTML pages, the timeline's SVG and the Markdown
//! summary are drawn from (minijinja, compiled into the binary).
//!
//! Rust code decides *what* a page shows (plain data, one function per
//! section or element family); the templates in `templates/` say *how* it
//! looks, so each reads like the page it draws. Two conventions keep the
//! output byte for byte what readers and CI compare:
//!
//! - **Layout.** A page's body and the SVG are one line: templates marked
//!   [`Layout::Joined`] are written one element per line, indented for
//!   reading, and their lines are joined (each line's indentation and line
//!   break dropped) before compiling. A line break the output needs is
//!   written `{{ "\n" }}`. The page shell, its style and script, and the
//!   Markdown summary keep their lines ([`Layout::AsWritten`]).
//! - **Escaping.** Every value printed in an HTML or SVG template is
//!   escaped by [`esc`] unless the template marks it `|safe`
//!   (a picture or a fragment another template drew); Markdown is not
//!   escaped. Printing a name the context lacks is an error, not an
//!   empty string (an `{% if %}` may test for one: optional fields are
//!   left out of the context).

use std::sync::OnceLock;

use minijinja::{AutoEscape, Environment, Error, Output, State, UndefinedBehavior, Value};
use serde::Serialize;

/// Escapes text for HTML element content and quoted attribute values.
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// How a template's source becomes the template.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Layout {
    /// Lines joined, indentation dropped: the output is one line.
    Joined,
    /// As written (block tags trim the line break after them).
    AsWritten,
}

/// `(name, layout, source)` of each template in `templates/`.
macro_rules! templates {
    ($($layout:ident $name:literal,)*) => {
        &[$(($name, Layout::$layout, include_str!(concat!("templates/", $name))),)*]
    };
}

/// Every template: its name (the extension picks the escaping), its layout
/// and its source.
const TEMPLATES: &[(&str, Layout, &str)] = templates![
    AsWritten "shell.html",
    Joined "macros.html",
    Joined "provenance.html",
    AsWritten "provenance.md",
    Joined "run.html",
    Joined "run_header.html",
    Joined "run_invariants.html",
    Joined "run_timeline.html",
    Joined "run_likelihood.html",
    Joined "run_attempts.html",
    Joined "run_chain.html",
    Joined "run_windows.html",
    Joined "run_diff.html",
    Joined "run_decisions.html",
    Joined "index.html",
    Joined "timeline.svg",
    AsWritten "summary.md",
];

/// Joins the lines of `source`, dropping each line's indentation.
fn join_lines(source: &str) -> String {
    source.lines().map(str::trim_start).collect()
}

/// Prints a value: escaped by [`esc`] in HTML and SVG, unless marked safe.
fn format(out: &mut Output<'_>, state: &State<'_, '_>, value: &Value) -> Result<(), Error> {
    if value.is_safe() || *state.auto_escape() == AutoEscape::None {
        write!(out, "{value}")?;
    } else {
        out.write_str(&esc(&value.to_string()))?;
    }
    Ok(())
}

fn escaping(name: &str) -> AutoEscape {
    if name.ends_with(".html") || name.ends_with(".svg") {
        AutoEscape::Html
    } else {
        AutoEscape::None
    }
}

fn environment() -> Result<Environment<'static>, Error> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::SemiStrict);
    env.set_auto_escape_callback(escaping);
    env.set_formatter(|out, state, value| format(out, state, value));
    env.set_syntax(
        minijinja::syntax::SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .keep_trailing_newline(true)
            .build()?,
    );
    // The shell's style and script: real CSS and JavaScript files, printed
    // as they are.
    env.add_global(
        "page_style",
        Value::from_safe_string(include_str!("templates/page.css").to_owned()),
    );
    env.add_global(
        "page_script",
        Value::from_safe_string(include_str!("templates/page.js").to_owned()),
    );
    for (name, layout, source) in TEMPLATES {
        match layout {
            Layout::Joined => env.add_template_owned(*name, join_lines(source))?,
            Layout::AsWritten => env.add_template(name, source)?,
        }
    }
    Ok(env)
}

static ENVIRONMENT: OnceLock<Environment<'static>> = OnceLock::new();

/// Renders the template `name` with `context`.
///
/// The templates are compiled in and every one is rendered by this
/// crate's tests, so a failure here is a bug in a template or in the
/// context its caller built, never bad input: it panics with minijinja's
/// account of what and where.
pub(crate) fn render<C: Serialize>(name: &str, context: C) -> String {
    let env = ENVIRONMENT.get_or_init(|| {
        environment().unwrap_or_else(|e| panic!("the report templates do not compile: {e:#}"))
    });
    env.get_template(name)
        .and_then(|t| t.render(minijinja::value::Serde(context)))
        .unwrap_or_else(|e| panic!("template {name}: {}", chain(&e)))
}

/// An error and every error under it, one per line.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        text.push_str(&format!("\n  {e}"));
        source = e.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_template_compiles() {
        let env = environment().expect("the templates compile");
        for (name, _, _) in TEMPLATES {
            assert!(env.get_template(name).is_ok(), "{name}");
        }
    }

    #[test]
    fn joined_lines_lose_their_indentation_and_breaks() {
        assert_eq!(join_lines("<p>\n  <b>x</b>\n</p>\n"), "<p><b>x</b></p>");
    }

    #[test]
    fn html_is_escaped_like_esc_and_safe_values_are_not() {
        let mut env = Environment::new();
        env.set_auto_escape_callback(escaping);
        env.set_formatter(|out, state, value| format(out, state, value));
        let html = env
            .render_named_str(
                "t.html",
                "{{ a }}|{{ a|safe }}",
                minijinja::context! { a => "<a href='/x'>&" },
            )
            .expect("renders");
        assert_eq!(html, "&lt;a href=&#39;/x&#39;&gt;&amp;|<a href='/x'>&");
        let md = env
            .render_named_str("t.md", "{{ a }}", minijinja::context! { a => "<b>" })
            .expect("renders");
        assert_eq!(md, "<b>");
    }
}
