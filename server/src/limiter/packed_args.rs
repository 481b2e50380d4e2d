//! MessagePack written for `lua/check.lua`: a batch sends how many keys each check has, and
//! each check's arguments, as one MessagePack array each, which the script reads with
//! `cmsgpack.unpack` (the batch layout is in the script's header).
//!
//! Why: Redis makes every argument of a call an object, and the script's `ARGV` an entry for
//! it, about a thousand instructions an argument; the script's `tonumber` of a string parses
//! it with `strtod`, about 1,300 more. A check of two rules had 22 arguments, 15 of them
//! numbers. Packed, they are one argument, and their integers reach the script as numbers
//! (docs/BENCHMARKS.md, "A check's arguments, packed": about 10% fewer instructions a check in
//! a batch, counted with `scripts/script-instructions`).
//!
//! Each value is written in its shortest form, to a buffer or straight into the next argument
//! of a command (`redis::RedisWrite::writer_for_next_arg`), which cannot fail: both only grow
//! a vector. Only what the script's arguments need is here: arrays, integers and strings.
//! [`super::batch_reply`] reads the same format back.

use std::io::Write;

/// Writes `bytes` to memory, which cannot fail (a vector that cannot grow aborts).
fn put(out: &mut impl Write, bytes: &[u8]) {
    let _ = out.write_all(bytes);
}

/// Appends the header of an array of `len` items.
pub fn array(out: &mut impl Write, len: usize) {
    if len < 16 {
        put(out, &[0x90 | len as u8]);
    } else if let Ok(len) = u16::try_from(len) {
        put(out, &[0xdc]);
        put(out, &len.to_be_bytes());
    } else {
        put(out, &[0xdd]);
        put(out, &u32::try_from(len).unwrap_or(u32::MAX).to_be_bytes());
    }
}

/// Appends an unsigned integer.
pub fn uint(out: &mut impl Write, v: u64) {
    if v < 0x80 {
        put(out, &[v as u8]);
    } else if let Ok(v) = u8::try_from(v) {
        put(out, &[0xcc, v]);
    } else if let Ok(v) = u16::try_from(v) {
        put(out, &[0xcd]);
        put(out, &v.to_be_bytes());
    } else if let Ok(v) = u32::try_from(v) {
        put(out, &[0xce]);
        put(out, &v.to_be_bytes());
    } else {
        put(out, &[0xcf]);
        put(out, &v.to_be_bytes());
    }
}

/// Appends a signed integer.
pub fn int(out: &mut impl Write, v: i64) {
    if let Ok(v) = u64::try_from(v) {
        uint(out, v);
    } else if v >= -32 {
        // Negative fixint: the byte is the number's own two's complement.
        put(out, &[v as i8 as u8]);
    } else if let Ok(v) = i8::try_from(v) {
        put(out, &[0xd0, v as u8]);
    } else if let Ok(v) = i16::try_from(v) {
        put(out, &[0xd1]);
        put(out, &v.to_be_bytes());
    } else if let Ok(v) = i32::try_from(v) {
        put(out, &[0xd2]);
        put(out, &v.to_be_bytes());
    } else {
        put(out, &[0xd3]);
        put(out, &v.to_be_bytes());
    }
}

/// Appends a string (its bytes as they are).
pub fn str(out: &mut impl Write, s: &[u8]) {
    let len = s.len();
    if len < 32 {
        put(out, &[0xa0 | len as u8]);
    } else if let Ok(len) = u8::try_from(len) {
        put(out, &[0xd9, len]);
    } else if let Ok(len) = u16::try_from(len) {
        put(out, &[0xda]);
        put(out, &len.to_be_bytes());
    } else {
        put(out, &[0xdb]);
        put(out, &u32::try_from(len).unwrap_or(u32::MAX).to_be_bytes());
    }
    put(out, s);
}

/// Appends values already packed (a check's arguments, an item of a batch's array).
pub fn raw(out: &mut impl Write, packed: &[u8]) {
    put(out, packed);
}

/// The most bytes [`uint`] or [`int`] writes.
pub const MAX_INT_LEN: usize = 9;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::batch_reply;
    use proptest::prelude::*;
    use redis::Value;

    /// Each value as [`batch_reply`] reads it: an integer, or a string.
    #[derive(Debug, Clone)]
    enum Item {
        Int(i64),
        Uint(u64),
        Str(Vec<u8>),
    }

    fn item() -> impl Strategy<Value = Item> {
        prop_oneof![
            any::<i64>().prop_map(Item::Int),
            // Every width's edges, and what lies between.
            prop_oneof![
                Just(0_i64),
                Just(-1),
                Just(-32),
                Just(-33),
                Just(127),
                Just(128),
                Just(255),
                Just(256),
                Just(65_535),
                Just(65_536),
                Just(-128),
                Just(-129),
                Just(-32_768),
                Just(-32_769),
                Just(i64::from(u32::MAX)),
                Just(i64::from(u32::MAX) + 1),
                Just(i64::from(i32::MIN)),
                Just(i64::from(i32::MIN) - 1),
                Just(i64::MIN),
                Just(i64::MAX),
            ]
            .prop_map(Item::Int),
            (0..=i64::MAX as u64).prop_map(Item::Uint),
            prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..40),
                Just(vec![b'x'; 255]),
                Just(vec![b'x'; 256]),
                Just(vec![b'x'; 65_536]),
            ]
            .prop_map(Item::Str),
        ]
    }

    proptest! {
        /// What is written reads back as the same values, for every width of integer,
        /// string and array.
        #[test]
        fn written_values_read_back_as_written(
            items in proptest::collection::vec(item(), 0..40),
            padding in prop_oneof![Just(0_usize), Just(20), Just(70_000)],
        ) {
            let mut out = Vec::new();
            array(&mut out, items.len() + padding);
            for item in &items {
                match item {
                    Item::Int(v) => int(&mut out, *v),
                    Item::Uint(v) => uint(&mut out, *v),
                    Item::Str(s) => str(&mut out, s),
                }
            }
            for _ in 0..padding {
                int(&mut out, -1);
            }
            let read = batch_reply::decode(&out).unwrap();
            prop_assert_eq!(read.len(), items.len() + padding);
            for (item, value) in items.iter().zip(&read) {
                let expected = match item {
                    Item::Int(v) => Value::Int(*v),
                    Item::Uint(v) => Value::Int(*v as i64),
                    Item::Str(s) => Value::BulkString(s.clone()),
                };
                prop_assert_eq!(value, &expected);
            }
        }
    }

    #[test]
    fn each_value_takes_its_shortest_form() {
        let packed = |write: &dyn Fn(&mut Vec<u8>)| {
            let mut out = Vec::new();
            write(&mut out);
            out
        };
        assert_eq!(packed(&|o| int(o, 5)), [0x05]);
        assert_eq!(packed(&|o| int(o, -1)), [0xff]);
        assert_eq!(packed(&|o| int(o, -33)), [0xd0, 0xdf]);
        assert_eq!(packed(&|o| uint(o, 200)), [0xcc, 200]);
        assert_eq!(packed(&|o| uint(o, 60_000)), [0xcd, 0xea, 0x60]);
        assert_eq!(packed(&|o| uint(o, 1_000_000_000)).len(), 5);
        assert_eq!(packed(&|o| uint(o, 1_800_000_000_000)).len(), MAX_INT_LEN);
        assert_eq!(packed(&|o| str(o, b"01")), [0xa2, b'0', b'1']);
        assert_eq!(packed(&|o| str(o, &[b'c'; 32]))[..2], [0xd9, 32]);
        assert_eq!(packed(&|o| array(o, 3)), [0x93]);
        assert_eq!(packed(&|o| array(o, 64)), [0xdc, 0, 64]);
    }
}
