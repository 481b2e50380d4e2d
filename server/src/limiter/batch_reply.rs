//! The reply of a batch of checks (`lua/check.lua`'s header): one string, the list of the
//! checks' replies packed by Redis's `cmsgpack`, the same bytes the script keeps as the batch's
//! record. Read back here into the values a reply of nested arrays would have given, so each
//! check's reply is read as before.
//!
//! Why not nested arrays: the Redis client parses a reply value by value through a general
//! parser, about a thousand instructions a value, and a one-rule check's reply has nine of them
//! (`scripts/check-instructions --redis`, docs/BENCHMARKS.md). One string is one value; the
//! walk below is a few instructions a byte. Redis saves too: the script packs the list for its
//! record anyway, and no longer turns its tables into a reply of its own.
//!
//! Only what `cmsgpack` writes for the script's replies is read: integers of every width,
//! strings, arrays and `nil`, and floats (which a reply never holds; they come back as
//! doubles, which the reader of a check's reply refuses). A map, or bytes left over or cut
//! short, is an error, never a guess.

use redis::Value;

/// Nested lists deeper than a batch's (the list, a check's reply) are refused: what reads
/// them need not recurse without end on a corrupt string.
const MAX_DEPTH: usize = 4;

/// The checks' replies of a batch, in order, from the string the script returned.
pub fn decode(bytes: &[u8]) -> Result<Vec<Value>, String> {
    let mut reader = Reader { bytes, at: 0 };
    let value = reader.value(0)?;
    if reader.at != bytes.len() {
        return Err(format!(
            "{} bytes left after the batch's replies",
            bytes.len() - reader.at
        ));
    }
    match value {
        Value::Array(replies) => Ok(replies),
        other => Err(format!("the batch's reply is not a list: {other:?}")),
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&end| end <= self.bytes.len())
            .ok_or_else(|| format!("the batch's reply is cut short at byte {}", self.at))?;
        let taken = &self.bytes[self.at..end];
        self.at = end;
        Ok(taken)
    }

    /// A big-endian unsigned number of `n` bytes.
    fn unsigned(&mut self, n: usize) -> Result<u64, String> {
        Ok(self
            .take(n)?
            .iter()
            .fold(0, |v, &byte| v << 8 | u64::from(byte)))
    }

    /// A big-endian two's complement number of `n` bytes (1, 2, 4 or 8).
    fn signed(&mut self, n: usize) -> Result<i64, String> {
        let shift = 64 - 8 * n as u32;
        // Shifted up and back down, the top bit of the n bytes carries the sign.
        Ok(((self.unsigned(n)? << shift) as i64) >> shift)
    }

    fn length(&mut self, n: usize) -> Result<usize, String> {
        usize::try_from(self.unsigned(n)?).map_err(|_| "a length past memory".to_owned())
    }

    fn value(&mut self, depth: usize) -> Result<Value, String> {
        let tag = self.take(1)?[0];
        Ok(match tag {
            0x00..=0x7f => Value::Int(i64::from(tag)),
            0xe0..=0xff => Value::Int(i64::from(tag as i8)),
            0xcc => Value::Int(self.signed_of_unsigned(1)?),
            0xcd => Value::Int(self.signed_of_unsigned(2)?),
            0xce => Value::Int(self.signed_of_unsigned(4)?),
            0xcf => Value::Int(self.signed_of_unsigned(8)?),
            0xd0 => Value::Int(self.signed(1)?),
            0xd1 => Value::Int(self.signed(2)?),
            0xd2 => Value::Int(self.signed(4)?),
            0xd3 => Value::Int(self.signed(8)?),
            0xca => Value::Double(f64::from(f32::from_bits(self.unsigned(4)? as u32))),
            0xcb => Value::Double(f64::from_bits(self.unsigned(8)?)),
            // Redis turns a script's nil and false into a nil reply, and true into 1.
            0xc0 | 0xc2 => Value::Nil,
            0xc3 => Value::Int(1),
            0xa0..=0xbf => self.string(usize::from(tag & 0x1f))?,
            0xd9 | 0xc4 => {
                let n = self.length(1)?;
                self.string(n)?
            }
            0xda | 0xc5 => {
                let n = self.length(2)?;
                self.string(n)?
            }
            0xdb | 0xc6 => {
                let n = self.length(4)?;
                self.string(n)?
            }
            0x90..=0x9f => self.list(usize::from(tag & 0x0f), depth)?,
            0xdc => {
                let n = self.length(2)?;
                self.list(n, depth)?
            }
            0xdd => {
                let n = self.length(4)?;
                self.list(n, depth)?
            }
            other => {
                return Err(format!(
                    "the batch's reply holds a value of type {other:#04x} at byte {}",
                    self.at - 1
                ))
            }
        })
    }

    fn signed_of_unsigned(&mut self, n: usize) -> Result<i64, String> {
        let v = self.unsigned(n)?;
        i64::try_from(v).map_err(|_| format!("the batch's reply holds {v}, past a 64-bit integer"))
    }

    fn string(&mut self, n: usize) -> Result<Value, String> {
        Ok(Value::BulkString(self.take(n)?.to_vec()))
    }

    fn list(&mut self, n: usize, depth: usize) -> Result<Value, String> {
        if depth >= MAX_DEPTH {
            return Err("the batch's reply nests lists too deep".to_owned());
        }
        // Every item takes a byte at least, so a corrupt length cannot reserve more than the
        // string holds.
        let mut items = Vec::with_capacity(n.min(self.bytes.len() - self.at));
        for _ in 0..n {
            items.push(self.value(depth + 1)?);
        }
        Ok(Value::Array(items))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn a_batch_of_two_checks_reads_back_as_nested_lists() {
        // What cmsgpack packs for { {0, 1800000000000, 1, 1, "4", 500, 0},
        // {0, 1800000000000, 0, 0, "0", 1000, 250} }: a time as uint64, a verdict of -1 as a
        // negative fixint, 1000 as uint16, a string of one byte as a fixstr.
        let mut bytes = vec![0x92, 0x97, 0x00, 0xcf];
        bytes.extend_from_slice(&1_800_000_000_000_u64.to_be_bytes());
        bytes.extend_from_slice(&[0x01, 0x01, 0xa1, b'4', 0xcd, 0x01, 0xf4, 0x00]);
        bytes.extend_from_slice(&[0x97, 0x00, 0xcf]);
        bytes.extend_from_slice(&1_800_000_000_000_u64.to_be_bytes());
        bytes.extend_from_slice(&[0x00, 0xff, 0xa1, b'0', 0xcd, 0x03, 0xe8, 0xcc, 0xfa]);
        let replies = decode(&bytes).unwrap();
        let now = Value::Int(1_800_000_000_000);
        assert_eq!(
            replies,
            vec![
                Value::Array(vec![
                    Value::Int(0),
                    now.clone(),
                    Value::Int(1),
                    Value::Int(1),
                    bulk("4"),
                    Value::Int(500),
                    Value::Int(0),
                ]),
                Value::Array(vec![
                    Value::Int(0),
                    now,
                    Value::Int(0),
                    Value::Int(-1),
                    bulk("0"),
                    Value::Int(1000),
                    Value::Int(250),
                ]),
            ]
        );
    }

    #[test]
    fn every_integer_width_and_sign_reads_back() {
        let cases: Vec<(Vec<u8>, i64)> = vec![
            (vec![0x7f], 127),
            (vec![0xe0], -32),
            (vec![0xcc, 0xff], 255),
            (vec![0xcd, 0xff, 0xff], 65_535),
            (vec![0xce, 0xff, 0xff, 0xff, 0xff], 4_294_967_295),
            (vec![0xd0, 0x80], -128),
            (vec![0xd1, 0x80, 0x00], -32_768),
            (vec![0xd2, 0xff, 0xff, 0xff, 0xfe], -2),
            (vec![0xd3, 0x80, 0, 0, 0, 0, 0, 0, 0], i64::MIN),
            (
                vec![0xcf, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
                i64::MAX,
            ),
        ];
        for (bytes, expected) in cases {
            let mut list = vec![0x91];
            list.extend_from_slice(&bytes);
            assert_eq!(
                decode(&list).unwrap(),
                vec![Value::Int(expected)],
                "{bytes:02x?}"
            );
        }
    }

    #[test]
    fn longer_strings_and_lists_and_an_error_reply_read_back() {
        // A check that failed: { 3, "<an error of 40 bytes>" }, the error as a str8.
        let error = "WRONGTYPE Operation against a key holdin";
        let mut bytes = vec![0xdc, 0x00, 0x01, 0x92, 0x03, 0xd9, error.len() as u8];
        bytes.extend_from_slice(error.as_bytes());
        assert_eq!(
            decode(&bytes).unwrap(),
            vec![Value::Array(vec![Value::Int(3), bulk(error)])]
        );
    }

    #[test]
    fn corrupt_strings_are_refused_not_guessed() {
        let refused: Vec<(&str, Vec<u8>)> = vec![
            ("empty", vec![]),
            ("not a list", vec![0x01]),
            ("cut short", vec![0x92, 0x01]),
            ("a string cut short", vec![0x91, 0xa5, b'a']),
            ("bytes left over", vec![0x91, 0x01, 0x01]),
            ("a map", vec![0x91, 0x81, 0x01, 0x01]),
            ("past 64 bits", vec![0x91, 0xcf, 0xff, 0, 0, 0, 0, 0, 0, 0]),
            ("too deep", vec![0x91, 0x91, 0x91, 0x91, 0x91, 0x01]),
            ("a huge length", vec![0xdd, 0xff, 0xff, 0xff, 0xff]),
        ];
        for (case, bytes) in refused {
            assert!(decode(&bytes).is_err(), "{case}: {:?}", decode(&bytes));
        }
    }
}
