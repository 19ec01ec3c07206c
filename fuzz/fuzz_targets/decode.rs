//! Fuzzes the pgoutput decoder: arbitrary bytes, cut into messages, go through the relation
//! cache and the router. It must never panic, whatever the input; errors are fine.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use relay_core::{
    Lsn,
    decode::Decoder,
    route::{OutboxTable, Position},
};

fuzz_target!(|data: &[u8]| {
    let mut decoder = Decoder::new(&[OutboxTable::default()], true);
    let pos = Position { commit_lsn: Lsn(1), commit_time_unix_us: 0, seq: 0 };
    // Each message: one length byte, then that many bytes.
    let mut rest = data;
    while let Some((&len, tail)) = rest.split_first() {
        let n = usize::from(len).min(tail.len());
        let _ = decoder.decode(Bytes::copy_from_slice(&tail[..n]), pos);
        rest = &tail[n..];
    }
});
