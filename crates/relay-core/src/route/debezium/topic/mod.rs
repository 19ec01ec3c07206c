//! `route.by.field`, `route.topic.regex` and `route.topic.replacement`: the topic as Debezium's
//! Outbox Event Router computes it. The record's topic is first the `route.by.field` column's
//! value; then Kafka Connect's RegexRouter runs: when the regex matches the *whole* value
//! (`Matcher.matches()`), the topic is `Matcher.replaceFirst(replacement)`, else the value
//! itself. `replaceFirst` searches again from the start and replaces the *first* match only,
//! which a lazy quantifier or an alternation can make shorter than the value: the rest of the
//! value is kept around the replacement.
//!
//! Invariant: the regex is read as Java reads it ([`pattern::translate`], or refused) and the
//! replacement as `Matcher.appendReplacement` reads it ([`Piece`], or refused), so a routed
//! topic is the one Debezium computes or the configuration does not load. Kafka's config parser
//! trims string values (`ConfigDef`, type STRING) before RegexRouter sees them: so does
//! [`TopicRouter::compile`].

use std::collections::HashMap;

use regex::Regex;

use super::DebeziumOptions;

mod pattern;

/// Debezium's default `route.by.field`.
const DEFAULT_ROUTE_BY_FIELD: &str = "aggregatetype";
/// Debezium's default `route.topic.regex`.
const DEFAULT_REGEX: &str = "(?<routedByValue>.*)";
/// Debezium's default `route.topic.replacement`.
const DEFAULT_REPLACEMENT: &str = "outbox.event.${routedByValue}";

/// A `route.*` option the relay cannot apply as Debezium does, found at config load.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopicError {
    #[error("debezium.\"route.topic.regex\" = {regex:?}: {detail}")]
    Regex { regex: String, detail: String },
    #[error("debezium.\"route.topic.replacement\" = {replacement:?}: {detail}")]
    Replacement { replacement: String, detail: String },
    #[error("debezium.\"route.by.field\" is empty: name the column whose value routes the event")]
    EmptyRouteByField,
}

/// One part of a compiled replacement.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    /// A group's text (nothing when the group did not take part in the match).
    Group(usize),
}

/// `route.topic.regex` + `route.topic.replacement`, compiled once.
#[derive(Debug, Clone)]
pub(crate) struct TopicRouter {
    /// `\A(?:regex)\z`: Java's `matches()`.
    whole: Regex,
    /// The regex itself: the search of Java's `replaceFirst`.
    first: Regex,
    replacement: Vec<Piece>,
}

impl DebeziumOptions {
    /// The column whose value routes the event, when one of `route.by.field`,
    /// `route.topic.regex`, `route.topic.replacement` is set (the others then take Debezium's
    /// defaults). `None`: the `[[outbox]]` `topic` template routes.
    pub(crate) fn route_by_field(&self) -> Option<&str> {
        let set = self.route_by_field.is_some()
            || self.route_topic_regex.is_some()
            || self.route_topic_replacement.is_some();
        set.then(|| {
            self.route_by_field
                .as_deref()
                .unwrap_or(DEFAULT_ROUTE_BY_FIELD)
        })
    }

    /// The compiled regex and replacement when [`DebeziumOptions::route_by_field`] routes.
    pub(crate) fn topic_router(&self) -> Result<Option<TopicRouter>, TopicError> {
        match self.route_by_field() {
            None => Ok(None),
            Some("") => Err(TopicError::EmptyRouteByField),
            Some(_) => TopicRouter::compile(
                self.route_topic_regex.as_deref().unwrap_or(DEFAULT_REGEX),
                self.route_topic_replacement
                    .as_deref()
                    .unwrap_or(DEFAULT_REPLACEMENT),
            )
            .map(Some),
        }
    }
}

/// Java's `String.trim()`: every char up to U+0020 off both ends.
fn java_trim(s: &str) -> &str {
    s.trim_matches(|c| c <= ' ')
}

impl TopicRouter {
    pub(crate) fn compile(regex: &str, replacement: &str) -> Result<TopicRouter, TopicError> {
        let (regex, replacement) = (java_trim(regex), java_trim(replacement));
        let bad_regex = |detail: String| TopicError::Regex {
            regex: regex.to_string(),
            detail,
        };
        let translated = pattern::translate(regex).map_err(bad_regex)?;
        if pattern::repeats_empty(&translated) {
            return Err(bad_regex(
                "a repeated part that can match the empty string (such as `(a|)*` or \
                 `(?:a?)+`): Java's and the relay's regex engines end such a loop differently; \
                 rewrite it so that what is repeated cannot match nothing"
                    .into(),
            ));
        }
        let compile = |p: &str| Regex::new(p).map_err(|e| bad_regex(e.to_string()));
        let first = compile(&translated)?;
        let whole = compile(&format!(r"\A(?:{translated})\z"))?;
        let names: HashMap<&str, usize> = first
            .capture_names()
            .enumerate()
            .filter_map(|(i, n)| n.map(|n| (n, i)))
            .collect();
        let replacement =
            Piece::parse(replacement, first.captures_len() - 1, &names).map_err(|detail| {
                TopicError::Replacement {
                    replacement: replacement.to_string(),
                    detail,
                }
            })?;
        Ok(TopicRouter {
            whole,
            first,
            replacement,
        })
    }

    /// The topic of a row whose `route.by.field` holds `value`.
    pub(crate) fn route(&self, value: String) -> String {
        if !self.whole.is_match(&value) {
            return value;
        }
        let Some(caps) = self.first.captures(&value) else {
            return value;
        };
        let m = caps.get(0).expect("group 0 is the match");
        let mut out = String::with_capacity(value.len() + 32);
        out.push_str(&value[..m.start()]);
        for p in &self.replacement {
            match p {
                Piece::Text(t) => out.push_str(t),
                Piece::Group(g) => out.push_str(caps.get(*g).map_or("", |g| g.as_str())),
            }
        }
        out.push_str(&value[m.end()..]);
        out
    }
}

impl Piece {
    /// Java's replacement syntax: `\x` is `x`; `$n` is group n, further digits joining while
    /// the number is a group (`$12` is group 1 then `2` when there is no group 12); `${name}`
    /// is a named group. Anything else after `$` is an error, as are unknown groups (Java
    /// throws on the first record; here the configuration does not load).
    fn parse(
        text: &str,
        groups: usize,
        names: &HashMap<&str, usize>,
    ) -> Result<Vec<Piece>, String> {
        let mut out: Vec<Piece> = Vec::new();
        let literal = |out: &mut Vec<Piece>, c: char| match out.last_mut() {
            Some(Piece::Text(t)) => t.push(c),
            _ => out.push(Piece::Text(c.to_string())),
        };
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\\' => {
                    let c = chars.next().ok_or(
                        "it ends in a `\\` that escapes nothing: write \\\\ for a backslash",
                    )?;
                    literal(&mut out, c);
                }
                '$' => match chars.next() {
                    Some('{') => {
                        let mut name = String::new();
                        while let Some(c) = chars.next_if(char::is_ascii_alphanumeric) {
                            name.push(c);
                        }
                        if chars.next() != Some('}') || name.is_empty() {
                            return Err(format!(
                                "`${{{name}` is not a group reference ${{name}} (ASCII letters \
                                 and digits)"
                            ));
                        }
                        let g = names.get(name.as_str()).ok_or_else(|| {
                            format!("the regex has no group named {name:?} (`${{{name}}}`)")
                        })?;
                        out.push(Piece::Group(*g));
                    }
                    Some(d @ '0'..='9') => {
                        let mut g = d as usize - '0' as usize;
                        while let Some(d) = chars.peek().and_then(|c| c.to_digit(10)) {
                            match g.checked_mul(10).and_then(|g| g.checked_add(d as usize)) {
                                Some(n) if n <= groups => {
                                    g = n;
                                    chars.next();
                                }
                                _ => break,
                            }
                        }
                        if g > groups {
                            return Err(format!(
                                "`${g}` refers to group {g}, and the regex has {groups} group(s)"
                            ));
                        }
                        out.push(Piece::Group(g));
                    }
                    _ => {
                        return Err(
                            "a `$` that is not followed by a group number or {name}: write \\$ \
                             for a dollar sign"
                                .into(),
                        );
                    }
                },
                c => literal(&mut out, c),
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
