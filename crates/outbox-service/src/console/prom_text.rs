//! Reads the Prometheus text the process renders for `/metrics`: the console's documents are
//! built from it, so the page, `/status.json`, `status` and a scrape show the same numbers.

/// One line of the text: a series and its value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample<'a> {
    pub name: &'a str,
    labels: &'a str,
    pub value: f64,
}

impl<'a> Sample<'a> {
    /// The value of label `key`, if the series has it (values with escaped quotes are cut at the
    /// first quote: label values here are names, not free text).
    pub fn label(&self, key: &str) -> Option<&'a str> {
        let mut rest = self.labels;
        while let Some((k, tail)) = rest.split_once("=\"") {
            let (v, tail) = tail.split_once('"')?;
            if k.trim_start_matches(',').trim() == key {
                return Some(v);
            }
            rest = tail;
        }
        None
    }
}

/// Every sample of `text`, comments and unparsable lines skipped.
pub fn samples(text: &str) -> impl Iterator<Item = Sample<'_>> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let value = value.parse::<f64>().ok()?;
            let (name, labels) = match series.split_once('{') {
                Some((n, l)) => (n, l.trim_end_matches('}')),
                None => (series, ""),
            };
            Some(Sample {
                name,
                labels,
                value,
            })
        })
}

/// The sum of every series of `name` (a counter over all its labels).
pub fn total(text: &str, name: &str) -> f64 {
    samples(text)
        .filter(|s| s.name == name)
        .map(|s| s.value)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_and_labels() {
        let text = "# HELP x y\nup 1\nlag{source=\"a\",topic=\"t\"} 2.5\nbad line\n";
        let s: Vec<Sample> = samples(text).collect();
        assert_eq!(s.len(), 2);
        assert_eq!(
            (s[0].name, s[0].value, s[0].label("source")),
            ("up", 1.0, None)
        );
        assert_eq!(s[1].label("source"), Some("a"));
        assert_eq!(s[1].label("topic"), Some("t"));
        assert_eq!(s[1].label("sour"), None);
        assert_eq!(total(text, "lag"), 2.5);
    }
}
