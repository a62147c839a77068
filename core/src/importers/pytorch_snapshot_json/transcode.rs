//! JSON → pickle opcodes, streamed: a serde visitor that writes, for each JSON value as the
//! parser meets it, the protocol-4 opcodes of the equal Python value (`{}` + `SETITEM`, `[]` +
//! `APPEND`, `BINUNICODE`, `BININT`/`LONG1`, `BINFLOAT`, `NEWTRUE`/`NEWFALSE`, `NONE`). Hand
//! written: no crate writes pickles from a serde stream, and this is the whole of it.

use std::fmt;
use std::io::{BufWriter, Read, Write};

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::error::ImportError;

/// Writes one JSON value's pickle opcodes.
struct Emit<'a, W: Write>(&'a mut W);

fn io<E: serde::de::Error>(e: std::io::Error) -> E {
    E::custom(format!("writing the decoder's input: {e}"))
}

impl<'de, W: Write> DeserializeSeed<'de> for Emit<'_, W> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, W: Write> Visitor<'de> for Emit<'_, W> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        self.0.write_all(b"}").map_err(io)?;
        while map.next_key_seed(Emit(&mut *self.0))?.is_some() {
            map.next_value_seed(Emit(&mut *self.0))?;
            self.0.write_all(b"s").map_err(io)?;
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.0.write_all(b"]").map_err(io)?;
        while seq.next_element_seed(Emit(&mut *self.0))?.is_some() {
            self.0.write_all(b"a").map_err(io)?;
        }
        Ok(())
    }

    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<(), E> {
        let len = u32::try_from(s.len()).map_err(|_| E::custom("a string over 4 GiB"))?;
        self.0.write_all(b"X").map_err(io)?;
        self.0.write_all(&len.to_le_bytes()).map_err(io)?;
        self.0.write_all(s.as_bytes()).map_err(io)
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<(), E> {
        match i32::try_from(v) {
            Ok(small) => {
                self.0.write_all(b"J").map_err(io)?;
                self.0.write_all(&small.to_le_bytes()).map_err(io)
            }
            Err(_) => long1(self.0, i128::from(v)).map_err(io),
        }
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<(), E> {
        match i64::try_from(v) {
            Ok(signed) => self.visit_i64(signed),
            Err(_) => long1(self.0, i128::from(v)).map_err(io),
        }
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<(), E> {
        self.0.write_all(b"G").map_err(io)?;
        self.0.write_all(&v.to_be_bytes()).map_err(io)
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<(), E> {
        self.0.write_all(&[if v { 0x88 } else { 0x89 }]).map_err(io)
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        self.0.write_all(b"N").map_err(io)
    }
}

/// `LONG1`: a little-endian two's-complement integer of the fewest bytes.
fn long1(w: &mut impl Write, v: i128) -> std::io::Result<()> {
    let bytes = v.to_le_bytes();
    let mut n = bytes.len();
    while n > 1 {
        let (last, prev) = (bytes[n - 1], bytes[n - 2]);
        if (last == 0 && prev & 0x80 == 0) || (last == 0xff && prev & 0x80 != 0) {
            n -= 1;
        } else {
            break;
        }
    }
    w.write_all(&[0x8a, n as u8])?;
    w.write_all(&bytes[..n])
}

/// Reads the JSON document from `json` and writes its pickle (protocol 4) to `out`.
pub fn json_to_pickle(json: Box<dyn Read + Send>, out: impl Write) -> Result<(), ImportError> {
    let mut out = BufWriter::with_capacity(1 << 20, out);
    out.write_all(&[0x80, 4])?;
    let mut de = serde_json::Deserializer::from_reader(std::io::BufReader::with_capacity(1 << 20, json));
    let done = Emit(&mut out)
        .deserialize(&mut de)
        .and_then(|()| de.end())
        .map_err(|e| {
            if e.is_io() && e.to_string().contains("writing the decoder's input") {
                // The decoder stopped reading (it found a problem of its own): not the JSON's fault.
                return None;
            }
            Some(ImportError::Log(format!("JSON: {e}")))
        });
    match done {
        Ok(()) => {}
        Err(Some(e)) => return Err(e),
        Err(None) => return Ok(()),
    }
    out.write_all(b".")?;
    match out.flush() {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pickled(json: &str) -> Vec<u8> {
        let mut out = Vec::new();
        json_to_pickle(Box::new(std::io::Cursor::new(json.as_bytes().to_vec())), &mut out).expect("transcode");
        out
    }

    #[test]
    fn values_become_the_opcodes_of_equal_python_values() {
        assert_eq!(pickled("null"), vec![0x80, 4, b'N', b'.']);
        assert_eq!(pickled("[true]"), vec![0x80, 4, b']', 0x88, b'a', b'.']);
        assert_eq!(
            pickled(r#"{"a": 1}"#),
            vec![0x80, 4, b'}', b'X', 1, 0, 0, 0, b'a', b'J', 1, 0, 0, 0, b's', b'.']
        );
        // 140684524781568 (a device address) needs LONG1 of 6 bytes.
        let p = pickled("140684524781568");
        assert_eq!(&p[2..4], &[0x8a, 6]);
        assert_eq!(i64::from_le_bytes([p[4], p[5], p[6], p[7], p[8], p[9], 0, 0]), 140684524781568);
        assert_eq!(&pickled("-1")[2..7], &[b'J', 0xff, 0xff, 0xff, 0xff]);
    }

    #[test]
    fn a_json_error_names_where() {
        let e = json_to_pickle(Box::new(std::io::Cursor::new(b"{\"a\": [1, 2".to_vec())), Vec::new())
            .expect_err("truncated");
        assert!(e.to_string().starts_with("JSON: EOF while parsing"), "{e}");
    }
}
