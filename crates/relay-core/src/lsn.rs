//! PostgreSQL log sequence numbers.

use std::{fmt, str::FromStr};

/// A WAL position. Printed and parsed the way PostgreSQL does: `16/B374D848`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Lsn(pub u64);

impl Lsn {
    pub const ZERO: Lsn = Lsn(0);

    pub fn is_zero(self) -> bool {
        self.0 == 0
    }

    /// The text of [`Display`](fmt::Display) (`16/B374D848`), written without the formatting
    /// machinery: it goes into a header of every record (`relay.relay_headers`).
    pub fn to_text_bytes(self) -> bytes::Bytes {
        let mut buf = [0u8; 17];
        let mut n = hex_into(&mut buf, self.0 >> 32);
        buf[n] = b'/';
        n += 1;
        n += hex_into(&mut buf[n..], self.0 & 0xFFFF_FFFF);
        bytes::Bytes::copy_from_slice(&buf[..n])
    }
}

/// Writes `v` (at most 32 bits) as upper-case hexadecimal without leading zeros; returns the
/// number of bytes written.
fn hex_into(out: &mut [u8], v: u64) -> usize {
    const DIGITS: &[u8; 16] = b"0123456789ABCDEF";
    let len = (1 + (64 - v.leading_zeros() as usize).saturating_sub(1) / 4).max(1);
    for (i, b) in out[..len].iter_mut().enumerate() {
        *b = DIGITS[((v >> (4 * (len - 1 - i))) & 0xF) as usize];
    }
    len
}

impl fmt::Display for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:X}/{:X}", self.0 >> 32, self.0 & 0xFFFF_FFFF)
    }
}

/// The text was not of the form `X/Y` with hexadecimal halves.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid LSN {0:?}: expected two hexadecimal numbers separated by '/', like 16/B374D848")]
pub struct ParseLsnError(pub String);

impl FromStr for Lsn {
    type Err = ParseLsnError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || ParseLsnError(s.to_string());
        let (hi, lo) = s.split_once('/').ok_or_else(err)?;
        let hi = u32::from_str_radix(hi, 16).map_err(|_| err())?;
        let lo = u32::from_str_radix(lo, 16).map_err(|_| err())?;
        Ok(Lsn((u64::from(hi) << 32) | u64::from(lo)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prints_and_parses_like_postgres() {
        let lsn: Lsn = "16/B374D848".parse().unwrap();
        assert_eq!(lsn, Lsn(0x16_B374_D848));
        assert_eq!(lsn.to_string(), "16/B374D848");
        assert_eq!(Lsn(0).to_string(), "0/0");
        assert!("16B374D848".parse::<Lsn>().is_err());
        assert!("x/1".parse::<Lsn>().is_err());
    }

    #[test]
    fn text_bytes_are_the_display_text() {
        for v in [
            0,
            1,
            0xF,
            0x10,
            0xFFFF_FFFF,
            0x1_0000_0000,
            0x16_B374_D848,
            0xABCD_EF01_2345_6789,
            u64::MAX,
        ] {
            assert_eq!(
                Lsn(v).to_text_bytes(),
                Lsn(v).to_string().as_bytes(),
                "{v:#x}"
            );
        }
    }

    proptest::proptest! {
        #[test]
        fn text_bytes_are_the_display_text_of_any_lsn(v: u64) {
            let text = Lsn(v).to_string();
            proptest::prop_assert_eq!(Lsn(v).to_text_bytes(), text.as_bytes());
        }
    }
}
