//! Diagnostics: what is wrong, where, and how bad.

use std::fmt;

use serde::Serialize;

/// A position in a spec file, 1-based line and column (columns count characters, not bytes).
/// A value a spec takes from a `_defaults.yaml` (see `defaults`) is at a position in that
/// file: `source` says which (0: the spec's own file; N: the Nth defaults file of the spec's
/// chain, outermost first).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Pos {
    /// 1-based line. 32 bits: a spec file is at most 1 MiB, and every spec holds four
    /// positions (12 bytes each, not 24).
    pub line: u32,
    /// 1-based column, in characters.
    pub column: u32,
    /// Which file: 0 the spec's own; N the Nth `_defaults.yaml` applied to it.
    #[serde(skip)]
    pub source: u32,
}

impl Pos {
    /// A position from a 1-based line and column, in the file at hand.
    pub const fn new(line: usize, column: usize) -> Self {
        Pos {
            line: saturating_u32(line),
            column: saturating_u32(column),
            source: 0,
        }
    }

    /// The start of a file: used for problems that concern a whole file.
    pub const START: Pos = Pos::new(1, 1);
}

/// `n`, or `u32::MAX` past it (no spec file has that many lines).
const fn saturating_u32(n: usize) -> u32 {
    if n > u32::MAX as usize {
        u32::MAX
    } else {
        n as u32
    }
}

impl fmt::Display for Pos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}

/// How bad a diagnostic is. Only errors make a spec (or a run) invalid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Severity {
    /// The spec (or file) is invalid and is not acted on.
    Error,
    /// Accepted, but the user should change something (e.g. an ignored field).
    Warning,
}

/// One finding about a spec file, printed as `file:line:col: error: message`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Diagnostic {
    /// The file as it was named to the loader (or to [`super::parse_file`]).
    pub file: String,
    /// Where in the file.
    pub pos: Pos,
    /// Error or warning.
    pub severity: Severity,
    /// What is wrong and what would be valid.
    pub message: String,
    /// The `metadata.name` of the document this diagnostic belongs to, when it is known.
    ///
    /// The reconcile engine uses it to tell "this spec is invalid" (leave its VM alone, mark it
    /// Stalled) from "this spec was removed". An error with `spec: None` could not be tied to a
    /// name (e.g. a YAML syntax error), so the set of specs of that run is incomplete.
    pub spec: Option<String>,
    /// A SOPS-encrypted value that does not open (no matching identity, a changed file): the
    /// spec is `DecryptionFailed` rather than `ValidationFailed`.
    #[serde(skip)]
    pub decryption: bool,
}

impl Diagnostic {
    /// An error at `pos` in `file`.
    pub fn error(file: &str, pos: Pos, message: impl Into<String>) -> Self {
        Diagnostic {
            file: file.to_string(),
            pos,
            severity: Severity::Error,
            message: message.into(),
            spec: None,
            decryption: false,
        }
    }

    /// A warning at `pos` in `file`.
    pub fn warning(file: &str, pos: Pos, message: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Warning,
            ..Diagnostic::error(file, pos, message)
        }
    }

    /// The same diagnostic, attributed to the spec named `name`.
    pub fn for_spec(mut self, name: Option<&str>) -> Self {
        self.spec = name.map(str::to_string);
        self
    }

    /// True for [`Severity::Error`].
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sev = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        write!(
            f,
            "{}:{}:{}: {sev}: {}",
            self.file, self.pos.line, self.pos.column, self.message
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_format() {
        let d = Diagnostic::error("a.yaml", Pos::new(3, 7), "bad");
        assert_eq!(d.to_string(), "a.yaml:3:7: error: bad");
        let w = Diagnostic::warning("a.yaml", Pos::new(1, 1), "meh");
        assert_eq!(w.to_string(), "a.yaml:1:1: warning: meh");
    }
}
