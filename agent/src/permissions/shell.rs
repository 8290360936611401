//! The shell grammar behind permission rules: a bash line parsed with tree-sitter-bash into the
//! simple commands it would run and the redirections it makes.
//!
//! Every word is either [`Word::Literal`] — its value after quote removal, what the program
//! would see in its argv — or [`Word::Dynamic`], something bash only knows at run time
//! (expansions, command substitution, globs, ANSI-C and locale quoting). Anything that keeps the
//! line from being a plain list of commands with literal words is recorded as an *obstacle*:
//! rules can only allow a line without obstacles.
//!
//! The parser is a second implementation of bash's grammar, so it can disagree with bash. Known
//! disagreements are handled here: a line continuation inside a word (`r\⏎m`) is read both ways,
//! redirection targets that swallow the next words (`git >/dev/null push`) give those words back
//! to the command, and constructs the grammar does not know make the line incomplete.

use tree_sitter::{Node, Parser};

/// One word of a command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Word {
    /// The value the program sees, quotes removed.
    Literal(String),
    /// Only known at run time; the source text, for messages.
    Dynamic(String),
}

impl Word {
    pub fn literal(&self) -> Option<&str> {
        match self {
            Word::Literal(v) => Some(v),
            Word::Dynamic(_) => None,
        }
    }
}

/// A simple command: `NAME=value` prefixes, the command name and its arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    pub assignments: Vec<Word>,
    pub words: Vec<Word>,
    /// Inside a pipeline: it runs in a subshell, so a `cd` there does not last.
    pub in_pipeline: bool,
    /// Byte offset in the line, for ordering with redirections.
    pub offset: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedirectOp {
    /// `<`
    Read,
    /// `>`, `>>`, `>|`, `&>`, `&>>`, `>& file`
    Write,
    /// `<>`
    ReadWrite,
    /// `2>&1`, `>&-`, `<&0`: between descriptors, no file.
    Duplicate,
    /// `<<< word`
    HereString,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redirect {
    pub op: RedirectOp,
    pub target: Word,
    pub offset: usize,
}

/// What a line would run, as far as the grammar tells.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Script {
    /// Every simple command, nested ones included (in `$( )`, subshells, function bodies,
    /// loops), in source order.
    pub commands: Vec<Command>,
    pub redirects: Vec<Redirect>,
    /// What keeps the line from being a plain list of literal commands, each said once, in the
    /// order found. Empty: rules can judge it command by command.
    pub obstacles: Vec<String>,
    /// The parser did not understand part of the line: more may run than `commands` says.
    pub incomplete: bool,
}

impl Script {
    fn obstacle(&mut self, what: impl Into<String>) {
        let what = what.into();
        if !self.obstacles.contains(&what) {
            self.obstacles.push(what);
        }
    }

    /// Whether rules can judge the line command by command.
    pub fn is_plain(&self) -> bool {
        self.obstacles.is_empty() && !self.incomplete
    }
}

/// Parses a bash line.
pub fn parse(line: &str) -> Script {
    let mut script = parse_once(line);
    // tree-sitter-bash splits a word at a line continuation (`r\⏎m` reads as `r` and `m`);
    // bash removes `\⏎` before it splits words. Read the line both ways: a line whose two
    // readings differ cannot be judged, and what either reading runs counts for deny rules.
    if line.contains("\\\n") {
        let joined = parse_once(&remove_line_continuations(line));
        let same = |a: &Script, b: &Script| {
            a.commands
                .iter()
                .map(|c| (&c.assignments, &c.words))
                .eq(b.commands.iter().map(|c| (&c.assignments, &c.words)))
                && a.redirects
                    .iter()
                    .map(|r| (r.op, &r.target))
                    .eq(b.redirects.iter().map(|r| (r.op, &r.target)))
        };
        if !same(&script, &joined) {
            script.obstacle("a line continuation inside a word");
            script.commands.extend(joined.commands);
            script.redirects.extend(joined.redirects);
            script.incomplete |= joined.incomplete;
        }
    }
    script
}

/// `\⏎` removed everywhere (a reading that is wrong inside single quotes, which is why
/// [`parse`] uses it only as a second reading).
fn remove_line_continuations(line: &str) -> String {
    line.replace("\\\n", "")
}

/// Whether a pattern is a single plain command; its literal words if so.
pub fn literal_words(text: &str) -> Option<Vec<String>> {
    let script = parse(text);
    match (script.is_plain(), script.commands.as_slice()) {
        (true, [only]) if script.redirects.is_empty() => only
            .assignments
            .iter()
            .chain(&only.words)
            .map(|w| w.literal().map(str::to_owned))
            .collect(),
        _ => None,
    }
}

fn parse_once(line: &str) -> Script {
    let mut script = Script::default();
    let mut parser = Parser::new();
    let tree = match parser.set_language(&tree_sitter_bash::LANGUAGE.into()) {
        Ok(()) => parser.parse(line, None),
        Err(_) => None,
    };
    let Some(tree) = tree else {
        script.obstacle("a line the shell parser could not read");
        script.incomplete = true;
        return script;
    };
    let src = line.as_bytes();
    // Iterative walk that keeps its own ancestor stack: a line nested thousands deep must not
    // overflow the stack, and `Node::parent` searches from the root (quadratic when nested).
    let mut cursor = tree.walk();
    let mut ancestors: Vec<Ancestor> = Vec::new();
    loop {
        let node = cursor.node();
        visit(node, &ancestors, src, &mut script);
        if cursor.goto_first_child() {
            let in_pipeline =
                node.kind() == "pipeline" || ancestors.last().is_some_and(|a| a.in_pipeline);
            ancestors.push(Ancestor { node, in_pipeline });
            continue;
        }
        loop {
            if cursor.goto_next_sibling() {
                break;
            }
            if !cursor.goto_parent() {
                return script;
            }
            ancestors.pop();
        }
    }
}

struct Ancestor<'tree> {
    node: Node<'tree>,
    /// This node or one above it is a pipeline.
    in_pipeline: bool,
}

/// Tokens that may appear in a plain line (operators between commands, quotes, redirections).
const PLAIN_TOKENS: &[&str] = &[
    ";", ";;", "&&", "||", "|", "|&", "&", "\n", "\"", ">", ">>", "<", ">|", "&>", "&>>", ">&",
    "<&", ">&-", "<&-", "<<<",
];

/// Named nodes that may appear in a plain line; `command`, redirections and assignments are
/// handled on their own.
const PLAIN_KINDS: &[&str] = &[
    "program",
    "list",
    "pipeline",
    "redirected_statement",
    "command_name",
    "word",
    "string",
    "string_content",
    "raw_string",
    "concatenation",
    "number",
    "file_descriptor",
];

fn visit(node: Node, ancestors: &[Ancestor], src: &[u8], script: &mut Script) {
    let parent = ancestors.last();
    if node.is_error() || node.is_missing() {
        script.obstacle("shell syntax the parser does not understand");
        script.incomplete = true;
        return;
    }
    let kind = node.kind();
    // Below a construct already recorded (the `)` of `$( )`, the operands of `$(( ))`), a
    // node says nothing new.
    let in_plain = parent.is_none_or(|p| {
        let k = p.node.kind();
        PLAIN_KINDS.contains(&k)
            || matches!(
                k,
                "command" | "file_redirect" | "herestring_redirect" | "variable_assignment"
            )
    });
    if !node.is_named() {
        if in_plain && !PLAIN_TOKENS.contains(&kind) {
            script.obstacle(describe(kind));
        }
        return;
    }
    match kind {
        "command" => {
            let command = command(node, parent, src, script);
            script.commands.push(command);
        }
        "file_redirect" | "herestring_redirect" => {
            if let Some(r) = redirect(node, src, script) {
                script.redirects.push(r);
            }
        }
        "variable_assignment" if parent.is_some_and(|p| p.node.kind() == "command") => {}
        "comment" => {
            // A comment runs nothing, but one holding quotes is how the old splitter was
            // fooled; the grammar reads it right, and a line that needs one is not plain.
            let text = text(node, src);
            if text.contains(['\'', '"', '`', '\\']) {
                script.obstacle("a comment with quotes in it");
            }
        }
        k if PLAIN_KINDS.contains(&k) || !in_plain => {}
        other => script.obstacle(describe(other)),
    }
}

/// A construct's name as a person would say it.
fn describe(kind: &str) -> String {
    match kind {
        "command_substitution" | "$(" | "`" => "$( ) or backtick command substitution".into(),
        "process_substitution" | "<(" | ">(" => "process substitution".into(),
        "subshell" | "(" | ")" => "a subshell".into(),
        "compound_statement" | "{" | "}" => "a command group".into(),
        "simple_expansion" | "expansion" | "${" => "a variable expansion".into(),
        // The grammar reads `$"…"` as a lone `$` and a string.
        "$" => "locale quoting ($\"…\") or a lone $".into(),
        "arithmetic_expansion" | "$((" | "((" => "arithmetic".into(),
        "ansi_c_string" => "ANSI-C quoting ($'…')".into(),
        "translated_string" => "locale quoting ($\"…\")".into(),
        "heredoc_redirect" | "heredoc_body" | "heredoc_start" | "heredoc_end" | "<<" | "<<-" => {
            "a heredoc".into()
        }
        "variable_assignment" | "variable_assignments" => {
            "a variable assignment outside a command".into()
        }
        "declaration_command" | "unset_command" => "a variable declaration".into(),
        "function_definition" => "a function definition".into(),
        "if_statement"
        | "while_statement"
        | "for_statement"
        | "c_style_for_statement"
        | "case_statement" => "a control structure (if, for, while, case)".into(),
        "test_command" => "a [[ ]] test".into(),
        "brace_expression" => "brace expansion".into(),
        "negated_command" | "!" => "a negated command (!)".into(),
        other => format!("shell syntax `{other}`"),
    }
}

fn text<'a>(node: Node, src: &'a [u8]) -> &'a str {
    node.utf8_text(src).unwrap_or("")
}

fn command(node: Node, parent: Option<&Ancestor>, src: &[u8], script: &mut Script) -> Command {
    let mut assignments = Vec::new();
    let mut words = Vec::new();
    let mut cursor = node.walk();
    for (i, child) in node.children(&mut cursor).enumerate() {
        let field = u32::try_from(i)
            .ok()
            .and_then(|i| node.field_name_for_child(i));
        match (child.kind(), field) {
            ("variable_assignment", _) => assignments.push(assignment(child, src, script)),
            ("command_name", _) => {
                let name = child.named_child(0).unwrap_or(child);
                words.push(word(name, src, script));
            }
            (_, Some("argument")) => words.push(word(child, src, script)),
            _ => {}
        }
    }
    // `git >/dev/null push`: the grammar reads `push` as part of the redirection's target;
    // bash gives it to the command.
    if let Some(parent) = parent.map(|p| p.node)
        && parent.kind() == "redirected_statement"
    {
        let mut cursor = parent.walk();
        for r in parent.children_by_field_name("redirect", &mut cursor) {
            let mut c = r.walk();
            words.extend(
                r.children_by_field_name("destination", &mut c)
                    .skip(1)
                    .map(|w| word(w, src, script)),
            );
        }
    }
    Command {
        assignments,
        words,
        in_pipeline: parent.is_some_and(|p| p.in_pipeline),
        offset: node.start_byte(),
    }
}

fn assignment(node: Node, src: &[u8], script: &mut Script) -> Word {
    let name = node
        .child_by_field_name("name")
        .map(|n| text(n, src))
        .unwrap_or_default();
    match node.child_by_field_name("value") {
        None => Word::Literal(format!("{name}=")),
        Some(value) => match word(value, src, script) {
            Word::Literal(v) => Word::Literal(format!("{name}={v}")),
            Word::Dynamic(_) => Word::Dynamic(text(node, src).to_string()),
        },
    }
}

fn redirect(node: Node, src: &[u8], script: &mut Script) -> Option<Redirect> {
    let offset = node.start_byte();
    if node.kind() == "herestring_redirect" {
        let target = node
            .named_child(0)
            .map(|w| word(w, src, script))
            .unwrap_or(Word::Literal(String::new()));
        return Some(Redirect {
            op: RedirectOp::HereString,
            target,
            offset,
        });
    }
    let mut op = None;
    let mut cursor = node.walk();
    for child in node.children(&mut cursor) {
        if !child.is_named() {
            op = Some(child.kind());
        }
    }
    let destination = node.child_by_field_name("destination");
    let target = destination
        .map(|d| word(d, src, script))
        .unwrap_or(Word::Literal(String::new()));
    let to_descriptor = destination.is_none()
        || destination.is_some_and(|d| d.kind() == "number")
        || target == Word::Literal("-".into());
    let op = match op? {
        ">" | ">>" | ">|" | "&>" | "&>>" => RedirectOp::Write,
        ">&" if !to_descriptor => RedirectOp::Write,
        "<" => RedirectOp::Read,
        ">&" | "<&" | ">&-" | "<&-" => RedirectOp::Duplicate,
        other => {
            script.obstacle(format!("the redirection {other}"));
            return None;
        }
    };
    Some(Redirect { op, target, offset })
}

/// One character of a word, and whether quoting made it ordinary.
type Piece = (char, bool);

/// A word's value, or why it is only known at run time (recorded as an obstacle).
fn word(node: Node, src: &[u8], script: &mut Script) -> Word {
    let mut pieces = Vec::new();
    if let Err(why) = pieces_of(node, src, &mut pieces) {
        // A node kind that is not literal is recorded as an obstacle by the walk itself.
        if let Some(why) = why {
            script.obstacle(why);
        }
        return Word::Dynamic(text(node, src).to_string());
    }
    if let Some(why) = expands(&pieces) {
        script.obstacle(why);
        return Word::Dynamic(text(node, src).to_string());
    }
    Word::Literal(pieces.into_iter().map(|(c, _)| c).collect())
}

/// Why a word part is not literal: `None` for a node kind the walk records itself.
type NotLiteral = Option<&'static str>;

const EXPANDS_IN_TEXT: &str = "a $ or backtick that expands";

/// Appends the characters of a literal word part.
fn pieces_of(node: Node, src: &[u8], out: &mut Vec<Piece>) -> Result<(), NotLiteral> {
    let raw = text(node, src);
    match node.kind() {
        "word" => unquote(raw, out).then_some(()).ok_or(Some(EXPANDS_IN_TEXT)),
        "number" => {
            out.extend(raw.chars().map(|c| (c, false)));
            Ok(())
        }
        "raw_string" => {
            let inner = raw
                .strip_prefix('\'')
                .and_then(|r| r.strip_suffix('\''))
                .unwrap_or(raw);
            out.extend(inner.chars().map(|c| (c, true)));
            Ok(())
        }
        "string" => {
            let mut cursor = node.walk();
            for part in node.named_children(&mut cursor) {
                if part.kind() != "string_content" {
                    return Err(None);
                }
                if !double_quoted(text(part, src), out) {
                    return Err(Some(EXPANDS_IN_TEXT));
                }
            }
            Ok(())
        }
        "concatenation" => {
            let mut cursor = node.walk();
            for part in node.children(&mut cursor) {
                pieces_of(part, src, out)?;
            }
            Ok(())
        }
        _ => Err(None),
    }
}

/// Unquoted text: `\c` is `c`, `\⏎` is nothing; `$` and backticks are expansions.
fn unquote(raw: &str, out: &mut Vec<Piece>) -> bool {
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('\n') | None => {}
                Some(n) => out.push((n, true)),
            },
            '$' | '`' => return false,
            c => out.push((c, false)),
        }
    }
    true
}

/// The inside of `"…"`: backslash escapes only `$`, `` ` ``, `"`, `\` and a newline.
fn double_quoted(raw: &str, out: &mut Vec<Piece>) -> bool {
    let mut chars = raw.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.peek() {
                Some('\n') => {
                    chars.next();
                }
                Some(&n @ ('$' | '`' | '"' | '\\')) => {
                    chars.next();
                    out.push((n, true));
                }
                _ => out.push(('\\', true)),
            },
            // The grammar makes nodes of real expansions; a bare `$` it left in the text
            // (`"$"`, `"a$"`) is literal in bash too, unless something follows that expands.
            '$' if chars
                .peek()
                .is_some_and(|n| n.is_alphanumeric() || "_{(@*#?$!-".contains(*n)) =>
            {
                return false;
            }
            '`' => return false,
            c => out.push((c, true)),
        }
    }
    true
}

/// Why a word with these characters is expanded by bash (globs, braces, tilde), if it is.
fn expands(pieces: &[Piece]) -> Option<&'static str> {
    let unquoted = |i: usize, c: char| pieces.get(i).is_some_and(|&(p, q)| p == c && !q);
    // `*`, `?` and `[…]` match file names; a `[` without a closing `]` is literal.
    let bracket = pieces
        .iter()
        .position(|&(c, q)| c == '[' && !q)
        .is_some_and(|open| pieces[open + 1..].iter().any(|&(c, q)| c == ']' && !q));
    if bracket || pieces.iter().any(|&(c, q)| !q && matches!(c, '*' | '?')) {
        return Some("a glob pattern");
    }
    if unquoted(0, '~')
        || (1..pieces.len())
            .any(|i| unquoted(i, '~') && (unquoted(i - 1, '=') || unquoted(i - 1, ':')))
    {
        return Some("tilde expansion (~)");
    }
    // `{a,b}` and `{1..3}` expand; `{}` (find's placeholder) does not.
    let mut open = None;
    for (i, &(c, q)) in pieces.iter().enumerate() {
        match (c, q, open) {
            ('{', false, _) => open = Some(i),
            ('}', false, Some(start)) => {
                let inner = &pieces[start + 1..i];
                let comma = inner.iter().any(|&(c, q)| c == ',' && !q);
                let range = inner.windows(2).any(|w| w == [('.', false), ('.', false)]);
                if comma || range {
                    return Some("brace expansion");
                }
                open = None;
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lit(words: &[&str]) -> Vec<Word> {
        words.iter().map(|w| Word::Literal(w.to_string())).collect()
    }

    fn words(line: &str) -> Vec<Vec<Word>> {
        parse(line).commands.into_iter().map(|c| c.words).collect()
    }

    #[test]
    fn lists_and_pipelines_are_split_into_commands() {
        let s = parse("a && b || c; d | e & f\ng");
        assert!(s.is_plain(), "{s:?}");
        assert_eq!(
            words("a && b || c; d | e & f\ng"),
            ["a", "b", "c", "d", "e", "f", "g"].map(|w| lit(&[w]))
        );
        assert_eq!(
            words(r#"echo 'a && b' "; c""#),
            [lit(&["echo", "a && b", "; c"])]
        );
    }

    #[test]
    fn words_are_their_values_after_quote_removal() {
        assert_eq!(
            words(r#"\rm "r"m 'r'"m" r\m "a\"b\$c\x" 'it''s' a\ b"#),
            [lit(&["rm", "rm", "rm", "rm", "a\"b$c\\x", "its", "a b"])]
        );
        assert_eq!(
            parse("RUST_LOG=debug cargo test").commands[0].assignments,
            lit(&["RUST_LOG=debug"])
        );
        assert_eq!(
            words("git diff HEAD~1 -- a::b {} x=1 [ b] '*'"),
            [lit(&[
                "git", "diff", "HEAD~1", "--", "a::b", "{}", "x=1", "[", "b]", "*"
            ])]
        );
    }

    #[test]
    fn what_bash_expands_is_dynamic_and_an_obstacle() {
        for (line, obstacle) in [
            ("echo $HOME", "a variable expansion"),
            ("echo \"$HOME\"", "a variable expansion"),
            ("echo $(id)", "$( ) or backtick command substitution"),
            ("echo `id`", "$( ) or backtick command substitution"),
            ("diff <(ls a) <(ls b)", "process substitution"),
            ("(cd x && rm y)", "a subshell"),
            ("{ a; }", "a command group"),
            ("echo $'\\x41'", "ANSI-C quoting ($'…')"),
            ("ls *.rs", "a glob pattern"),
            ("ls a[12]", "a glob pattern"),
            ("ls ~/x", "tilde expansion (~)"),
            ("echo a={b,c}", "brace expansion"),
            ("x=rm; $x", "a variable assignment outside a command"),
            ("cat <<EOF\nhi\nEOF", "a heredoc"),
            (
                "for i in a; do echo $i; done",
                "a control structure (if, for, while, case)",
            ),
        ] {
            let s = parse(line);
            assert!(
                s.obstacles.iter().any(|o| o == obstacle),
                "{line}: {:?}",
                s.obstacles
            );
        }
        // Locale quoting: the grammar reads `$"x"` as a `$` and a string; either way, not plain.
        assert!(!parse("echo $\"x\"").is_plain());
    }

    #[test]
    fn nested_commands_are_found() {
        let all: Vec<String> = parse("echo $(rm a) `rm b` <(rm c); (rm d); f() { rm e; }")
            .commands
            .iter()
            .filter_map(|c| c.words.first()?.literal().map(str::to_owned))
            .collect();
        assert_eq!(all.iter().filter(|w| *w == "rm").count(), 5, "{all:?}");
    }

    #[test]
    fn comments_hide_nothing_from_the_grammar() {
        // The old splitter took the quote in the comment for an opening quote and never saw
        // the second command.
        assert_eq!(
            words("cargo test #'\ntouch X\n#'"),
            [lit(&["cargo", "test"]), lit(&["touch", "X"])]
        );
        assert_eq!(
            words("cargo test $'\\'' ; touch X # '")[1],
            lit(&["touch", "X"])
        );
        assert_eq!(words("echo a#b #c"), [lit(&["echo", "a#b"])]);
    }

    #[test]
    fn redirections_are_found_and_do_not_swallow_arguments() {
        let s = parse("cargo test > X 2>&1 >> src/lib.rs < in");
        let ops: Vec<(RedirectOp, Word)> =
            s.redirects.into_iter().map(|r| (r.op, r.target)).collect();
        assert_eq!(
            ops,
            [
                (RedirectOp::Write, Word::Literal("X".into())),
                (RedirectOp::Duplicate, Word::Literal("1".into())),
                (RedirectOp::Write, Word::Literal("src/lib.rs".into())),
                (RedirectOp::Read, Word::Literal("in".into())),
            ]
        );
        assert_eq!(parse("cat <<< hi").redirects[0].op, RedirectOp::HereString);
        assert_eq!(
            words("git >/dev/null push origin"),
            [lit(&["git", "push", "origin"])]
        );
        assert_eq!(parse("echo >& out").redirects[0].op, RedirectOp::Write);
    }

    #[test]
    fn a_line_continuation_inside_a_word_is_read_as_bash_reads_it() {
        let s = parse("r\\\nm -rf x");
        assert!(!s.is_plain());
        assert!(
            s.commands
                .iter()
                .any(|c| c.words == lit(&["rm", "-rf", "x"])),
            "{s:?}"
        );
        // Between words it is only whitespace, and the line stays plain.
        let s = parse("cargo test \\\n  --lib");
        assert!(s.is_plain(), "{s:?}");
        assert_eq!(s.commands[0].words, lit(&["cargo", "test", "--lib"]));
    }

    #[test]
    fn syntax_the_grammar_does_not_know_makes_the_line_incomplete() {
        assert!(parse("echo 'unclosed").incomplete);
        assert!(parse("cat <> f").incomplete);
        assert!(!parse("cargo test").incomplete);
    }

    #[test]
    fn deep_nesting_does_not_overflow() {
        let line = format!("{}x{}", "$(".repeat(5000), ")".repeat(5000));
        assert!(!parse(&line).is_plain());
    }
}
