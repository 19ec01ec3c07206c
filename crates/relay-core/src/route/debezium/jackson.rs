//! A JSON document read the way Debezium's router reads a payload it expands: Jackson 2.21's
//! `ObjectMapper.readTree` with its defaults, on Kafka Connect 4.3.
//!
//! Invariant: [`read`] accepts exactly what that call accepts and yields the same tree. Strict
//! JSON (no comments, leading zeros, trailing commas or raw control characters); the first
//! value is read and whatever follows it is ignored (`FAIL_ON_TRAILING_TOKENS` is off); a
//! repeated object key keeps its first position and its last value; integers become `int`,
//! `long` or `BigInteger` by size, every other number a `double`; strings are UTF-16 (a lone
//! surrogate from `\u` stays); and `StreamReadConstraints`' limits (nesting 1000, numbers 1000
//! characters, strings 20,000,000, names 50,000) are errors. Any difference here would change a
//! record's bytes or whether Debezium keeps the payload unexpanded.

/// A Java string: UTF-16 code units.
pub(crate) type JStr = Vec<u16>;

/// Jackson's node types, as far as the schema inference tells them apart.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Node {
    Null,
    Bool(bool),
    Int(i32),
    Long(i64),
    /// An integer beyond `long` (`BigIntegerNode`).
    BigInt,
    Double(f64),
    Str(JStr),
    Array(Vec<Node>),
    /// Fields in document order, keys unique.
    Object(Vec<(JStr, Node)>),
}

const MAX_DEPTH: usize = 1000;
const MAX_NUMBER: usize = 1000;
const MAX_STRING: usize = 20_000_000;
const MAX_NAME: usize = 50_000;

/// The document's first JSON value, or `None` where Jackson throws.
pub(crate) fn read(text: &str) -> Option<Node> {
    let mut r = Reader {
        text,
        b: text.as_bytes(),
        at: 0,
        depth: 0,
    };
    r.value()
}

struct Reader<'a> {
    text: &'a str,
    b: &'a [u8],
    at: usize,
    depth: usize,
}

impl Reader<'_> {
    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.b.get(self.at) {
            self.at += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip_ws();
        self.b.get(self.at).copied()
    }

    fn eat(&mut self, lit: &[u8]) -> Option<()> {
        self.b[self.at..]
            .starts_with(lit)
            .then(|| self.at += lit.len())
    }

    fn value(&mut self) -> Option<Node> {
        match self.peek()? {
            b'{' => self.object(),
            b'[' => self.array(),
            b'"' => Some(Node::Str(self.string(MAX_STRING)?)),
            b't' => self.eat(b"true").map(|()| Node::Bool(true)),
            b'f' => self.eat(b"false").map(|()| Node::Bool(false)),
            b'n' => self.eat(b"null").map(|()| Node::Null),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    fn enter(&mut self) -> Option<()> {
        self.depth += 1;
        self.at += 1;
        (self.depth <= MAX_DEPTH).then_some(())
    }

    fn object(&mut self) -> Option<Node> {
        self.enter()?;
        let mut fields: Vec<(JStr, Node)> = Vec::new();
        if self.peek()? == b'}' {
            self.at += 1;
            self.depth -= 1;
            return Some(Node::Object(fields));
        }
        loop {
            if self.peek()? != b'"' {
                return None;
            }
            let name = self.string(MAX_NAME)?;
            if self.peek()? != b':' {
                return None;
            }
            self.at += 1;
            let v = self.value()?;
            match fields.iter_mut().find(|(k, _)| *k == name) {
                Some(slot) => slot.1 = v,
                None => fields.push((name, v)),
            }
            match self.peek()? {
                b',' => self.at += 1,
                b'}' => break,
                _ => return None,
            }
        }
        self.at += 1;
        self.depth -= 1;
        Some(Node::Object(fields))
    }

    fn array(&mut self) -> Option<Node> {
        self.enter()?;
        let mut items = Vec::new();
        if self.peek()? == b']' {
            self.at += 1;
            self.depth -= 1;
            return Some(Node::Array(items));
        }
        loop {
            items.push(self.value()?);
            match self.peek()? {
                b',' => self.at += 1,
                b']' => break,
                _ => return None,
            }
        }
        self.at += 1;
        self.depth -= 1;
        Some(Node::Array(items))
    }

    /// A string at `"`, as UTF-16 units.
    fn string(&mut self, limit: usize) -> Option<JStr> {
        self.at += 1;
        let mut out: JStr = Vec::new();
        let mut chars = self.text.get(self.at..)?.char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '"' => {
                    self.at += i + 1;
                    return (out.len() <= limit).then_some(out);
                }
                '\\' => {
                    let (_, e) = chars.next()?;
                    let unit = match e {
                        '"' => 0x22,
                        '\\' => 0x5c,
                        '/' => 0x2f,
                        'b' => 0x08,
                        'f' => 0x0c,
                        'n' => 0x0a,
                        'r' => 0x0d,
                        't' => 0x09,
                        'u' => {
                            let mut u = 0u16;
                            for _ in 0..4 {
                                let d = chars.next()?.1.to_digit(16)?;
                                u = u << 4 | d as u16;
                            }
                            u
                        }
                        _ => return None,
                    };
                    out.push(unit);
                }
                c if (c as u32) < 0x20 => return None,
                c => {
                    let mut buf = [0u16; 2];
                    out.extend_from_slice(c.encode_utf16(&mut buf));
                }
            }
        }
        None
    }

    fn number(&mut self) -> Option<Node> {
        let start = self.at;
        let digits = |r: &mut Self| {
            let s = r.at;
            while let Some(b'0'..=b'9') = r.b.get(r.at) {
                r.at += 1;
            }
            r.at - s
        };
        if self.b[self.at] == b'-' {
            self.at += 1;
        }
        let int_start = self.at;
        let n = digits(self);
        if n == 0 || (n > 1 && self.b[int_start] == b'0') {
            return None;
        }
        let mut float = false;
        if self.b.get(self.at) == Some(&b'.') {
            self.at += 1;
            float = true;
            if digits(self) == 0 {
                return None;
            }
        }
        if let Some(b'e' | b'E') = self.b.get(self.at) {
            self.at += 1;
            float = true;
            if let Some(b'+' | b'-') = self.b.get(self.at) {
                self.at += 1;
            }
            if digits(self) == 0 {
                return None;
            }
        }
        let text = &self.text[start..self.at];
        // Jackson counts the digits of the integer, fraction and exponent parts.
        if text.bytes().filter(u8::is_ascii_digit).count() > MAX_NUMBER {
            return None;
        }
        Some(if float {
            Node::Double(text.parse().ok()?)
        } else if let Ok(i) = text.parse::<i32>() {
            Node::Int(i)
        } else if let Ok(l) = text.parse::<i64>() {
            Node::Long(l)
        } else {
            Node::BigInt
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(x: &str) -> JStr {
        x.encode_utf16().collect()
    }

    #[test]
    fn numbers_take_jacksons_node_types() {
        let n = read(r#"[1, -2147483649, 12345678901234567890, 1.10, 1E+2, -0, 0.5e-3]"#);
        assert_eq!(
            n,
            Some(Node::Array(vec![
                Node::Int(1),
                Node::Long(-2_147_483_649),
                Node::BigInt,
                Node::Double(1.1),
                Node::Double(100.0),
                Node::Int(0),
                Node::Double(0.0005),
            ]))
        );
    }

    #[test]
    fn a_repeated_key_keeps_its_place_and_its_last_value() {
        let n = read(r#"{"a": 1, "b": 2, "a": "x"}"#).unwrap();
        assert_eq!(
            n,
            Node::Object(vec![(s("a"), Node::Str(s("x"))), (s("b"), Node::Int(2))])
        );
    }

    #[test]
    fn what_follows_the_first_value_is_ignored() {
        assert_eq!(read("{} trailing ]]"), Some(Node::Object(vec![])));
        assert_eq!(read("[1]{"), Some(Node::Array(vec![Node::Int(1)])));
    }

    #[test]
    fn what_jackson_refuses_is_refused() {
        for bad in [
            "{",
            "[1,]",
            "{\"a\":01}",
            "[.5]",
            "[1.]",
            "[+1]",
            "[\"\t\"]",
            "[\"\\x\"]",
            "{a:1}",
            "[NaN]",
            "['x']",
            "[1 2]",
            "[-]",
        ] {
            assert_eq!(read(bad), None, "{bad}");
        }
    }

    #[test]
    fn strings_are_utf16_and_keep_a_lone_surrogate() {
        assert_eq!(
            read(r#"["é😀\ud800\n"]"#),
            Some(Node::Array(vec![Node::Str(vec![
                0xe9, 0xd83d, 0xde00, 0xd800, 0x0a
            ])]))
        );
    }

    #[test]
    fn nesting_stops_at_a_thousand() {
        let ok = format!("{}{}", "[".repeat(1000), "]".repeat(1000));
        assert!(read(&ok).is_some());
        let deep = format!("{}{}", "[".repeat(1001), "]".repeat(1001));
        assert_eq!(read(&deep), None);
    }

    #[test]
    fn numbers_longer_than_a_thousand_digits_are_refused() {
        assert!(read(&format!("[{}]", "9".repeat(1000))).is_some());
        assert_eq!(read(&format!("[{}]", "9".repeat(1001))), None);
    }
}
