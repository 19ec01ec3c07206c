//! `table.fields.additional.placement`: `column:header|envelope|partition[:alias]`, comma-
//! separated, as Debezium's router parses it (entries trimmed, the alias defaults to the column).

/// Where an additional column goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    Header,
    Envelope,
    Partition,
}

/// One parsed entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    pub column: String,
    pub placement: Placement,
    /// The header or envelope field name (the column's name unless aliased).
    pub alias: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "debezium.\"table.fields.additional.placement\" entry {0:?} is not column:header|envelope|\
     partition[:alias]"
)]
pub struct PlacementError(pub String);

impl Placement {
    pub fn parse(spec: &str) -> Result<Vec<Placed>, PlacementError> {
        let mut out = Vec::new();
        let mut partitions = 0;
        for entry in spec.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let bad = || PlacementError(entry.to_string());
            let parts: Vec<&str> = entry.split(':').map(str::trim).collect();
            if parts.len() < 2 || parts.len() > 3 || parts.iter().any(|p| p.is_empty()) {
                return Err(bad());
            }
            let placement = match parts[1].to_ascii_lowercase().as_str() {
                "header" => Placement::Header,
                "envelope" => Placement::Envelope,
                "partition" => Placement::Partition,
                _ => return Err(bad()),
            };
            if placement == Placement::Partition {
                partitions += 1;
                if partitions > 1 {
                    return Err(bad());
                }
            }
            out.push(Placed {
                column: parts[0].to_string(),
                placement,
                alias: parts.get(2).unwrap_or(&parts[0]).to_string(),
            });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_parse_with_and_without_alias() {
        let p = Placement::parse("type:header:eventType, ver:envelope ,n:partition").unwrap();
        assert_eq!(
            p,
            vec![
                Placed {
                    column: "type".into(),
                    placement: Placement::Header,
                    alias: "eventType".into()
                },
                Placed {
                    column: "ver".into(),
                    placement: Placement::Envelope,
                    alias: "ver".into()
                },
                Placed {
                    column: "n".into(),
                    placement: Placement::Partition,
                    alias: "n".into()
                },
            ]
        );
        assert_eq!(Placement::parse("").unwrap(), vec![]);
        for bad in [
            "type",
            "type:body",
            "a::b",
            "a:header:b:c",
            "a:partition,b:partition",
        ] {
            assert!(Placement::parse(bad).is_err(), "{bad}");
        }
    }
}
