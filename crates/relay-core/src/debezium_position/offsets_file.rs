//! Kafka Connect standalone's offsets file (`offset.storage.file.filename`): one Java-serialised
//! `java.util.HashMap<byte[], byte[]>` (`FileOffsetBackingStore.save`), whose keys and values
//! are the JSON bytes of Connect's internal converter.
//!
//! Only the part of the Java serialization stream protocol that such a file uses is read: the
//! stream header, one `TC_OBJECT` of class `java.util.HashMap` with its `writeObject` block
//! (buckets, size), then `size` pairs of `byte[]` (`TC_ARRAY`, class `[B`, possibly a
//! `TC_REFERENCE` to an earlier class descriptor or array) or `TC_NULL`. Anything else is an
//! error naming the byte offset: a wrong reading would pick a wrong position.

use super::Entry;

const MAGIC: [u8; 4] = [0xAC, 0xED, 0x00, 0x05];
const TC_NULL: u8 = 0x70;
const TC_REFERENCE: u8 = 0x71;
const TC_CLASSDESC: u8 = 0x72;
const TC_OBJECT: u8 = 0x73;
const TC_ARRAY: u8 = 0x75;
const TC_BLOCKDATA: u8 = 0x77;
const TC_ENDBLOCKDATA: u8 = 0x78;
const BASE_HANDLE: u32 = 0x7E_0000;

/// The file is not a Connect standalone offsets file this reader understands.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the offsets file is not a Kafka Connect standalone offsets file (a Java-serialised \
     HashMap<byte[], byte[]>): {detail} at byte {at}. Pass the file named by the worker's \
     offset.storage.file.filename, copied while the worker is stopped"
)]
pub struct OffsetsFileError {
    pub detail: String,
    pub at: usize,
}

/// What a handle of the stream names.
#[derive(Clone)]
enum Handle {
    /// A class descriptor (its name).
    Class(String),
    /// The map object itself.
    Map,
    Bytes(Vec<u8>),
}

struct Reader<'a> {
    data: &'a [u8],
    at: usize,
    handles: Vec<Handle>,
}

/// The entries of the file, in the map's iteration order (one per key).
pub fn read_offsets_file(data: &[u8]) -> Result<Vec<Entry>, OffsetsFileError> {
    let mut r = Reader {
        data,
        at: 0,
        handles: Vec::new(),
    };
    if r.take(4)? != MAGIC {
        return Err(r.fail_at(0, "no Java serialization header (AC ED 00 05)"));
    }
    r.expect(TC_OBJECT, "a serialised object")?;
    let class = r.class_desc()?;
    if class != "java.util.HashMap" {
        return Err(r.fail(format!("the object is a {class}, not a java.util.HashMap")));
    }
    r.handles.push(Handle::Map);
    // HashMap's serializable fields: loadFactor (float), threshold (int).
    r.take(8)?;
    r.expect(TC_BLOCKDATA, "HashMap's writeObject block")?;
    if r.u8()? != 8 {
        return Err(r.fail("HashMap's block is not 8 bytes (buckets, size)".into()));
    }
    let _buckets = r.u32()?;
    let size = r.u32()? as usize;
    let mut entries = Vec::with_capacity(size.min(1024));
    for _ in 0..size {
        let key = r.bytes_or_null()?;
        let value = r.bytes_or_null()?;
        let Some(key) = key else {
            return Err(r.fail("an entry with a null key".into()));
        };
        entries.push((key, value));
    }
    r.expect(TC_ENDBLOCKDATA, "the end of the HashMap")?;
    if r.at != data.len() {
        return Err(r.fail(format!("{} bytes after the map", data.len() - r.at)));
    }
    Ok(entries)
}

impl Reader<'_> {
    fn fail(&self, detail: String) -> OffsetsFileError {
        OffsetsFileError {
            detail,
            at: self.at,
        }
    }

    fn fail_at(&self, at: usize, detail: &str) -> OffsetsFileError {
        OffsetsFileError {
            detail: detail.to_string(),
            at,
        }
    }

    fn take(&mut self, n: usize) -> Result<&[u8], OffsetsFileError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.data.len())
            .ok_or_else(|| self.fail(format!("the file ends where {n} more bytes should be")))?;
        let s = &self.data[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn u8(&mut self) -> Result<u8, OffsetsFileError> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, OffsetsFileError> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> Result<u32, OffsetsFileError> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn expect(&mut self, tag: u8, what: &str) -> Result<(), OffsetsFileError> {
        let at = self.at;
        let found = self.u8()?;
        if found != tag {
            return Err(self.fail_at(
                at,
                &format!("expected {what} (0x{tag:02X}), found 0x{found:02X}"),
            ));
        }
        Ok(())
    }

    fn utf(&mut self) -> Result<String, OffsetsFileError> {
        let n = self.u16()? as usize;
        let at = self.at;
        let b = self.take(n)?.to_vec();
        String::from_utf8(b).map_err(|_| self.fail_at(at, "a name that is not UTF-8"))
    }

    fn handle(&mut self) -> Result<Handle, OffsetsFileError> {
        let at = self.at;
        let h = self.u32()?;
        h.checked_sub(BASE_HANDLE)
            .and_then(|i| self.handles.get(i as usize).cloned())
            .ok_or_else(|| self.fail_at(at, &format!("a reference to unknown handle 0x{h:X}")))
    }

    /// A new class descriptor (or a reference to one) without fields beyond primitives and
    /// without a superclass: the name.
    fn class_desc(&mut self) -> Result<String, OffsetsFileError> {
        let at = self.at;
        match self.u8()? {
            TC_REFERENCE => match self.handle()? {
                Handle::Class(name) => Ok(name),
                _ => Err(self.fail_at(at, "a reference to something that is not a class")),
            },
            TC_CLASSDESC => {
                let name = self.utf()?;
                self.take(8)?; // serialVersionUID
                self.handles.push(Handle::Class(name.clone()));
                let _flags = self.u8()?;
                let fields = self.u16()?;
                for _ in 0..fields {
                    let code = self.u8()?;
                    self.utf()?;
                    if !b"BCDFIJSZ".contains(&code) {
                        return Err(self.fail(format!(
                            "class {name} has an object field (type code {:?})",
                            code as char
                        )));
                    }
                }
                self.expect(TC_ENDBLOCKDATA, "the end of the class annotations")?;
                self.expect(TC_NULL, "no superclass")?;
                Ok(name)
            }
            other => Err(self.fail_at(
                at,
                &format!("expected a class descriptor, found 0x{other:02X}"),
            )),
        }
    }

    fn bytes_or_null(&mut self) -> Result<Option<Vec<u8>>, OffsetsFileError> {
        let at = self.at;
        match self.u8()? {
            TC_NULL => Ok(None),
            TC_REFERENCE => match self.handle()? {
                Handle::Bytes(b) => Ok(Some(b)),
                _ => Err(self.fail_at(at, "a reference to something that is not a byte[]")),
            },
            TC_ARRAY => {
                let class = self.class_desc()?;
                if class != "[B" {
                    return Err(self.fail_at(at, &format!("an array of {class}, not a byte[]")));
                }
                let n = self.u32()? as usize;
                let b = self.take(n)?.to_vec();
                self.handles.push(Handle::Bytes(b.clone()));
                Ok(Some(b))
            }
            other => Err(self.fail_at(
                at,
                &format!("expected a byte[] or null, found 0x{other:02X}"),
            )),
        }
    }
}
