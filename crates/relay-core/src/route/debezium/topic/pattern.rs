//! `route.topic.regex` is a `java.util.regex.Pattern` (Kafka Connect's RegexRouter compiles it
//! with the default flags); the `regex` crate speaks a different dialect. [`translate`] rewrites
//! the Java pattern into the crate's syntax.
//!
//! Invariant: the translation matches exactly the strings Java's pattern matches, with the same
//! groups (numbers and names) and the same leftmost-first preferences, or the construct is
//! refused by name. Nothing is approximated: the constructs whose meaning differs between the
//! engines are rewritten to Java's meaning (`.` stops at Java's five line terminators; `\d`,
//! `\w`, `\s` are ASCII; literals and `\<` stay literal), and everything not listed in
//! [`SUPPORTED`] is refused: lookaround, backreferences, possessive quantifiers, atomic groups,
//! inline flags, `$` (Java's also matches before a final line break), `\b`, `\p{..}`, `\Q..\E`,
//! octal escapes, nested classes and class intersections. One more difference is in the
//! matching itself: a loop whose body can match the empty string (`(a|)*`, `(?:a?)+`) may end,
//! in Java, on an empty iteration, which the `regex` crate never takes; such a loop is refused
//! ([`repeats_empty`]).

/// What the relay reproduces, for the refusal messages.
const SUPPORTED: &str = "literals, escaped punctuation, . [..] [^..] with ranges, \\d \\D \\w \\W \
     \\s \\S \\t \\n \\r \\f \\a \\e \\xhh \\x{h..h} \\uhhhh, ^ \\A \\z, (..) (?:..) (?<name>..), \
     |, and the greedy or lazy quantifiers * + ? {n} {n,} {n,m}";

/// Java's `.` without DOTALL: anything but `\n`, `\r`, U+0085, U+2028, U+2029.
const DOT: &str = r"[^\n\r\x{85}\x{2028}\x{2029}]";

/// What the previous token allows next.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Last {
    /// The start, `(` or `|`, or an anchor: nothing to repeat.
    Nothing,
    /// Something a quantifier may repeat.
    Atom,
    /// A greedy quantifier: `?` makes it lazy, `+` possessive.
    Quantifier,
    /// A lazy quantifier.
    Lazy,
}

/// One escape sequence.
enum Escape {
    Char(char),
    /// A shorthand class: its ASCII set (class syntax) and whether it is negated.
    Class(&'static str, bool),
    /// `\A` or `\z`.
    Anchor(&'static str),
}

/// The Java pattern in the `regex` crate's syntax, or what is not supported in it.
pub(super) fn translate(java: &str) -> Result<String, String> {
    let p: Vec<char> = java.chars().collect();
    let mut out = String::with_capacity(java.len() + 16);
    let mut last = Last::Nothing;
    let mut i = 0;
    while i < p.len() {
        let c = p[i];
        i += 1;
        last = match c {
            '\\' => {
                let (e, next) = escape(&p, i)?;
                i = next;
                match e {
                    Escape::Char(c) => push_literal(&mut out, c),
                    Escape::Class(set, neg) => push_class(&mut out, set, neg),
                    Escape::Anchor(a) => {
                        out.push_str(a);
                        last = Last::Nothing;
                        continue;
                    }
                }
                Last::Atom
            }
            '.' => {
                out.push_str(DOT);
                Last::Atom
            }
            '^' => {
                out.push('^');
                Last::Nothing
            }
            '$' => {
                return Err(
                    "`$` (Java's also matches before a line break that ends the value, which \
                     the relay cannot express): the whole value must match anyway, so drop it \
                     or write \\z"
                        .into(),
                );
            }
            '[' => {
                i = class(&p, i, &mut out)?;
                Last::Atom
            }
            '(' => {
                i = group(&p, i, &mut out)?;
                Last::Nothing
            }
            ')' => {
                out.push(')');
                Last::Atom
            }
            '|' => {
                out.push('|');
                Last::Nothing
            }
            '*' | '+' | '?' => {
                let (l, next) = quantifier(&p, i, &mut out, last, &c.to_string())?;
                i = next;
                l
            }
            '{' => {
                let close = repetition(&p, i).ok_or(
                    "a `{` that is not a repetition {n}, {n,} or {n,m} (Java refuses it): \
                     write \\{ for the character",
                )?;
                let q: String = p[i - 1..=close].iter().collect();
                let (l, next) = quantifier(&p, close + 1, &mut out, last, &q)?;
                i = next;
                l
            }
            c => {
                push_literal(&mut out, c);
                Last::Atom
            }
        };
    }
    Ok(out)
}

/// Whether the translated pattern repeats (more than once) a part that can match the empty
/// string. Java's loop then ends on an empty iteration where the `regex` crate refuses empty
/// iterations and tries the next alternative: checked against Kafka Connect's RegexRouter,
/// `(a|)*` on `a` gives `$1` = `` in Java, `a` here, and `(?:[ab]+|\w??)+` matches `ab` of
/// `abc` in Java, `abc` here. An unparsable pattern is left to `Regex::new` to refuse.
pub(super) fn repeats_empty(translated: &str) -> bool {
    use regex_syntax::hir::{Hir, HirKind};
    fn walk(h: &Hir) -> bool {
        match h.kind() {
            HirKind::Repetition(r) => {
                (r.max != Some(1) && r.sub.properties().minimum_len() == Some(0)) || walk(&r.sub)
            }
            HirKind::Capture(c) => walk(&c.sub),
            HirKind::Concat(v) | HirKind::Alternation(v) => v.iter().any(walk),
            _ => false,
        }
    }
    regex_syntax::Parser::new()
        .parse(translated)
        .is_ok_and(|h| walk(&h))
}

fn push_literal(out: &mut String, c: char) {
    out.push_str(&regex::escape(c.encode_utf8(&mut [0; 4])));
}

fn push_class(out: &mut String, set: &str, negated: bool) {
    out.push('[');
    if negated {
        out.push('^');
    }
    out.push_str(set);
    out.push(']');
}

/// `q` (already read, ending before `p[i]`) applied to the previous token, and its `?` (lazy)
/// or `+` (possessive) suffix.
fn quantifier(
    p: &[char],
    i: usize,
    out: &mut String,
    last: Last,
    q: &str,
) -> Result<(Last, usize), String> {
    match last {
        Last::Atom => {}
        Last::Quantifier | Last::Lazy => {
            return Err(format!(
                "the quantifier `{q}` right after another quantifier (Java refuses most such \
                 cases): put the repeated part in a group"
            ));
        }
        Last::Nothing => {
            return Err(format!(
                "the quantifier `{q}` has nothing before it to repeat (Java refuses it, or \
                 repeats an anchor): escape it"
            ));
        }
    }
    out.push_str(q);
    match p.get(i) {
        Some('?') => {
            out.push('?');
            Ok((Last::Lazy, i + 1))
        }
        Some('+') => Err(format!(
            "the possessive quantifier `{q}+` is not supported by the relay's regex engine: \
             write `{q}` (the same matches where nothing after it can match what it gave back)"
        )),
        _ => Ok((Last::Quantifier, i)),
    }
}

/// After `{` at `p[i - 1]`: the index of the `}` closing `{n}`, `{n,}` or `{n,m}`.
fn repetition(p: &[char], i: usize) -> Option<usize> {
    let digits = |from: usize| {
        let mut j = from;
        while p.get(j).is_some_and(char::is_ascii_digit) {
            j += 1;
        }
        j
    };
    let mut j = digits(i);
    if j == i {
        return None;
    }
    if p.get(j) == Some(&',') {
        j = digits(j + 1);
    }
    (p.get(j) == Some(&'}')).then_some(j)
}

/// After `\` at `p[i - 1]`: the escape and the index after it.
fn escape(p: &[char], i: usize) -> Result<(Escape, usize), String> {
    let Some(&c) = p.get(i) else {
        return Err("a `\\` at the end escapes nothing (Java refuses it)".into());
    };
    let one = |e| Ok((e, i + 1));
    match c {
        'd' => one(Escape::Class("0-9", false)),
        'D' => one(Escape::Class("0-9", true)),
        'w' => one(Escape::Class("a-zA-Z_0-9", false)),
        'W' => one(Escape::Class("a-zA-Z_0-9", true)),
        's' => one(Escape::Class(r"\t\n\x0B\x0C\r ", false)),
        'S' => one(Escape::Class(r"\t\n\x0B\x0C\r ", true)),
        't' => one(Escape::Char('\t')),
        'n' => one(Escape::Char('\n')),
        'r' => one(Escape::Char('\r')),
        'f' => one(Escape::Char('\x0C')),
        'a' => one(Escape::Char('\x07')),
        'e' => one(Escape::Char('\x1B')),
        'A' => one(Escape::Anchor(r"\A")),
        'z' => one(Escape::Anchor(r"\z")),
        'x' | 'u' => hex(p, i),
        '1'..='9' | 'k' => Err(format!(
            "the backreference `\\{c}` is not supported by the relay's regex engine"
        )),
        'Q' => Err("quoting with \\Q..\\E is not supported: escape each character".into()),
        c if c.is_ascii_alphanumeric() => Err(format!(
            "the escape `\\{c}` is not supported (the relay reproduces {SUPPORTED})"
        )),
        // Java: a backslash before any other character is that character.
        c => one(Escape::Char(c)),
    }
}

/// `\xhh`, `\x{h..h}` or `\uhhhh` (the `x` or `u` at `p[i]`).
fn hex(p: &[char], i: usize) -> Result<(Escape, usize), String> {
    let (from, to, next, what) = match (p[i], p.get(i + 1)) {
        ('x', Some('{')) => {
            let close = p[i..].iter().position(|c| *c == '}');
            let close = close.ok_or("`\\x{` without its `}`")? + i;
            (i + 2, close, close + 1, "\\x{h..h}")
        }
        ('x', _) => (i + 1, i + 3, i + 3, "\\xhh"),
        _ => (i + 1, i + 5, i + 5, "\\uhhhh"),
    };
    let digits: String = p.get(from..to).unwrap_or_default().iter().collect();
    let hex_digits = digits.chars().all(|c| c.is_ascii_hexdigit());
    let code = (!digits.is_empty() && digits.len() <= 8 && hex_digits)
        .then(|| u32::from_str_radix(&digits, 16).ok())
        .flatten()
        .ok_or_else(|| format!("a malformed {what} escape (Java refuses it)"))?;
    let c = char::from_u32(code).ok_or_else(|| {
        format!(
            "the escape {what} = U+{code:04X} is not a character (a surrogate half or out of \
             range): write the character itself"
        )
    })?;
    Ok((Escape::Char(c), next))
}

/// After `(` at `p[i - 1]`: writes the group's opening and returns the index after it.
fn group(p: &[char], i: usize, out: &mut String) -> Result<usize, String> {
    if p.get(i) != Some(&'?') {
        out.push('(');
        return Ok(i);
    }
    let unsupported = |what: &str| {
        Err(format!(
            "{what} is not supported by the relay's regex engine"
        ))
    };
    match (p.get(i + 1), p.get(i + 2)) {
        (Some(':'), _) => {
            out.push_str("(?:");
            Ok(i + 2)
        }
        (Some('=' | '!'), _) => unsupported("lookahead `(?=..)` / `(?!..)`"),
        (Some('<'), Some('=' | '!')) => unsupported("lookbehind `(?<=..)` / `(?<!..)`"),
        (Some('>'), _) => unsupported("the atomic group `(?>..)`"),
        (Some('<'), _) => {
            let start = i + 2;
            let end = p[start..].iter().position(|c| *c == '>').map(|k| k + start);
            let name: String = p[start..end.unwrap_or(start)].iter().collect();
            let java_name = name.starts_with(|c: char| c.is_ascii_alphabetic())
                && name.chars().all(|c| c.is_ascii_alphanumeric());
            match end {
                Some(end) if java_name => {
                    out.push_str("(?<");
                    out.push_str(&name);
                    out.push('>');
                    Ok(end + 1)
                }
                _ => Err(format!(
                    "the group name in `(?<{name}` is not a Java group name (an ASCII letter, \
                     then letters and digits, then `>`)"
                )),
            }
        }
        _ => Err(
            "inline flags `(?idmsux..)` are not supported: Java's and the relay's regex \
                  engines differ under them"
                .into(),
        ),
    }
}

/// After `[` at `p[i - 1]`: writes the class and returns the index after its `]`.
fn class(p: &[char], mut i: usize, out: &mut String) -> Result<usize, String> {
    out.push('[');
    if p.get(i) == Some(&'^') {
        out.push('^');
        i += 1;
    }
    let mut first = true;
    loop {
        let Some(&c) = p.get(i) else {
            return Err("a `[` without its `]`".into());
        };
        i += 1;
        match c {
            ']' if !first => {
                out.push(']');
                return Ok(i);
            }
            '[' => {
                return Err(
                    "a `[` inside a character class (a nested class or union, which Java's \
                     versions read differently): escape it as \\["
                        .into(),
                );
            }
            '&' if p.get(i) == Some(&'&') => {
                return Err("the class intersection `&&` is not supported".into());
            }
            _ => {}
        }
        first = false;
        let lo = if c == '\\' {
            let (e, next) = escape(p, i)?;
            i = next;
            match e {
                Escape::Char(c) => c,
                Escape::Class(set, neg) => {
                    if neg {
                        push_class(out, set, true);
                    } else {
                        out.push_str(set);
                    }
                    continue;
                }
                Escape::Anchor(a) => return Err(format!("the anchor `{a}` inside a class")),
            }
        } else {
            c
        };
        push_literal(out, lo);
        if p.get(i) != Some(&'-') || matches!(p.get(i + 1), None | Some(']')) {
            continue;
        }
        // A range lo-hi.
        i += 1;
        let hi = match p[i] {
            '\\' => match escape(p, i + 1)? {
                (Escape::Char(c), next) => {
                    i = next;
                    c
                }
                _ => return Err("a range that ends in a class or an anchor".into()),
            },
            '[' => return Err("a range that ends in a `[`".into()),
            c => {
                i += 1;
                c
            }
        };
        if hi < lo {
            return Err(format!(
                "the range {lo:?}-{hi:?} runs backwards (Java refuses it)"
            ));
        }
        out.push('-');
        push_literal(out, hi);
    }
}
