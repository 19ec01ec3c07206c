//! The rule against a model of Debezium (every record carries the offset context of its time;
//! Connect stores the offset of an acknowledged prefix), and the offsets file reader.

use proptest::prelude::*;

use super::*;

// ---- the rule, against a model of Debezium ----

#[derive(Debug, Clone)]
struct Tx {
    /// Start of the commit record (what the relay calls the commit LSN).
    commit: Lsn,
    /// End of the commit record (what Debezium stores as `lsn_commit`).
    end: Lsn,
    /// The LSN of each outbox change, anywhere below the commit: concurrent transactions
    /// interleave in the WAL.
    changes: Vec<u64>,
    /// A heartbeat record is emitted at this commit (heartbeat.interval.ms).
    heartbeat: bool,
}

/// A record Debezium emitted: the transaction it is of (`None`: a heartbeat) and its offset.
#[derive(Debug, Clone)]
struct Emitted {
    txn: Option<usize>,
    lsn: u64,
    lsn_commit: Option<Lsn>,
}

fn history() -> impl Strategy<Value = Vec<Tx>> {
    prop::collection::vec(
        (
            1u64..50,
            prop::collection::vec(0u64..1000, 0..5),
            any::<bool>(),
        ),
        1..8,
    )
    .prop_map(|shape| {
        let mut at = 1000;
        shape
            .into_iter()
            .map(|(gap, changes, heartbeat)| {
                at += gap * 10;
                let commit = Lsn(at);
                at += 8;
                // Each change lies below its commit; later transactions may have lower ones.
                let changes = changes.into_iter().map(|c| commit.0 - 1 - c).collect();
                Tx {
                    commit,
                    end: Lsn(at),
                    changes,
                    heartbeat,
                }
            })
            .collect()
    })
}

/// What Debezium emits for `txs`, in order.
fn emit(txs: &[Tx]) -> Vec<Emitted> {
    let mut out = Vec::new();
    let mut lsn_commit = None;
    for (i, t) in txs.iter().enumerate() {
        for &lsn in &t.changes {
            out.push(Emitted {
                txn: Some(i),
                lsn,
                lsn_commit,
            });
        }
        lsn_commit = Some(t.end);
        if t.heartbeat {
            out.push(Emitted {
                txn: None,
                lsn: t.end.0,
                lsn_commit,
            });
        }
    }
    out
}

fn offset_of(e: &Emitted) -> DebeziumOffset {
    DebeziumOffset {
        connector: "c".into(),
        server: "s".into(),
        lsn_commit: e.lsn_commit,
        lsn_proc: Some(Lsn(e.lsn)),
        lsn: Some(Lsn(e.lsn)),
        tx_id: None,
        ts_usec: None,
        snapshot_running: false,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Nothing Debezium had not committed is skipped; what is re-sent of what it had committed
    /// is only the transaction its last committed record belongs to; a slot the rule accepts
    /// sends every transaction that is re-sent.
    #[test]
    fn skips_only_what_connect_committed(
        txs in history(),
        acked in any::<prop::sample::Index>(),
        slot in 0u64..3000,
    ) {
        let records = emit(&txs);
        prop_assume!(!records.is_empty());
        let m = acked.index(records.len()) + 1; // Connect stored the offset of records[m - 1]
        let stored = &records[m - 1];
        let proven = offset_of(stored).proven().unwrap();
        let skipped = |txn: usize| txs[txn].commit < proven.complete_before;
        for (k, r) in records.iter().enumerate() {
            let Some(txn) = r.txn else { continue };
            if k >= m {
                prop_assert!(!skipped(txn), "record {k} of txn {txn} not in Kafka but skipped");
            } else if !skipped(txn) {
                prop_assert_eq!(stored.txn, Some(txn), "re-sent record {} of another txn", k);
            }
        }
        let slot = Lsn(slot * 2);
        if slot_leaves_no_gap(proven, slot) {
            for (i, t) in txs.iter().enumerate() {
                prop_assert!(skipped(i) || t.commit >= slot, "txn {i} neither skipped nor sent");
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    /// The cutover's checkpoint through the relay's start-up skip, from any slot position the
    /// cutover accepts: the outbox rows of proven transactions are skipped, every other one is
    /// published, and the stream never looks like a changed history.
    #[test]
    fn the_cutover_checkpoint_skips_exactly_the_proven_transactions(
        txs in history(),
        acked in any::<prop::sample::Index>(),
        back in any::<prop::sample::Index>(),
    ) {
        let records = emit(&txs);
        prop_assume!(!records.is_empty());
        let stored = &records[acked.index(records.len())];
        let proven = offset_of(stored).proven().unwrap();
        let c = proven.checkpoint("7", "app", "slot", 1, None);
        prop_assert!(is_cutover_checkpoint(&c));
        // Any slot start at or before the proven position (PostgreSQL sends the transactions
        // committing at or after it).
        let start = Lsn(back.index(proven.complete_before.0 as usize + 1) as u64);
        prop_assert!(slot_leaves_no_gap(proven, start));
        let mut skip = crate::skip::Skip::new(Some(&c), start);
        for t in txs.iter().filter(|t| t.commit >= start) {
            skip.begin(t.commit).unwrap();
            for (i, _) in t.changes.iter().enumerate() {
                let v = skip
                    .change(i as u64, Some("public.outbox"), || format!("id:{i}"))
                    .unwrap();
                let want = if t.commit < proven.complete_before {
                    crate::skip::Verdict::Skip
                } else {
                    crate::skip::Verdict::Publish
                };
                prop_assert_eq!(v, want);
            }
            skip.commit().unwrap();
        }
        if let Some(last) = txs.last() {
            skip.keepalive(last.end);
            prop_assert!(skip.is_done() && skip.is_verified());
        }
    }
}

#[test]
fn a_per_change_lsn_rule_would_lose_what_this_one_keeps() {
    // T1 (changes at 500, 900) commits at 1000; T2's change at 600 was written while T1 was
    // open, and T2 commits at 1100. Connect committed the offset of T1's last change.
    let t1 = Tx {
        commit: Lsn(1000),
        end: Lsn(1008),
        changes: vec![500, 900],
        heartbeat: false,
    };
    let t2 = Tx {
        commit: Lsn(1100),
        end: Lsn(1108),
        changes: vec![600],
        heartbeat: false,
    };
    let records = emit(&[t1.clone(), t2.clone()]);
    let stored = offset_of(&records[1]);
    assert_eq!(stored.lsn, Some(Lsn(900)));
    // Skipping changes at or below `lsn` would drop T2's change at 600, which is not in Kafka.
    assert!(600 <= stored.lsn.unwrap().0);
    // The rule re-sends both transactions.
    let proven = stored.proven().unwrap();
    assert!(t1.commit >= proven.complete_before && t2.commit >= proven.complete_before);
    // After T1's commit (a heartbeat, or T2's record), T1 is proven and T2 is not.
    let after = offset_of(&records[2]).proven().unwrap();
    assert!(t1.commit < after.complete_before && t2.commit >= after.complete_before);
}

// ---- offsets as Connect stores them ----

fn key(name: &str, server: &str) -> Vec<u8> {
    format!(r#"["{name}",{{"server":"{server}"}}]"#).into_bytes()
}

const VALUE: &str = r#"{"transaction_id":null,"lsn_proc":23461680,"messageType":"INSERT","lsn_commit":23461552,"lsn":23461680,"txId":1021,"ts_usec":1764606541523761}"#;

#[test]
fn the_newest_offset_of_the_connector_is_read() {
    let old = r#"{"lsn_commit":100,"lsn":120}"#;
    let entries = vec![
        (key("other", "x"), Some(old.as_bytes().to_vec())),
        (b"not json".to_vec(), None),
        (key("c", "s"), Some(old.as_bytes().to_vec())),
        (key("c", "s"), Some(VALUE.as_bytes().to_vec())),
    ];
    let o = DebeziumOffset::select(&entries, "c", None).unwrap();
    assert_eq!(o.lsn_commit, Some(Lsn(23461552)));
    assert_eq!(o.lsn, Some(Lsn(23461680)));
    assert_eq!(o.tx_id, Some(1021));
    assert_eq!(o.proven().unwrap().complete_before, Lsn(23461552));
    let err = DebeziumOffset::select(&entries, "missing", None).unwrap_err();
    assert!(err.to_string().contains("other, c"), "{err}");
}

#[test]
fn deleted_ambiguous_and_snapshotting_offsets_are_refused() {
    let v = Some(VALUE.as_bytes().to_vec());
    let deleted = vec![(key("c", "s"), v.clone()), (key("c", "s"), None)];
    assert!(matches!(
        DebeziumOffset::select(&deleted, "c", None),
        Err(OffsetError::NotFound { .. })
    ));
    let two = vec![(key("c", "a"), v.clone()), (key("c", "b"), v.clone())];
    assert!(matches!(
        DebeziumOffset::select(&two, "c", None),
        Err(OffsetError::Ambiguous { .. })
    ));
    assert!(DebeziumOffset::select(&two, "c", Some("b")).is_ok());
    let snap = br#"{"snapshot":"INITIAL","last_snapshot_record":false,"lsn":5}"#;
    let o = DebeziumOffset::parse("c", "s", snap).unwrap();
    assert!(matches!(o.proven(), Err(OffsetError::SnapshotRunning(_))));
    let done = br#"{"snapshot":"INITIAL","snapshot_completed":true,"lsn":5}"#;
    let o = DebeziumOffset::parse("c", "s", done).unwrap();
    assert_eq!(o.proven().unwrap().complete_before, Lsn::ZERO);
    assert!(DebeziumOffset::parse("c", "s", br#"{"lsn_commit":"1/2"}"#).is_err());
}

// ---- the standalone offsets file ----

/// A file as `FileOffsetBackingStore.save` writes it (ObjectOutputStream of a HashMap).
fn java_file(entries: &[Entry]) -> Vec<u8> {
    let mut f = vec![0xAC, 0xED, 0x00, 0x05, 0x73, 0x72];
    utf(&mut f, "java.util.HashMap");
    f.extend(0x0507_DAC1_C316_60D1u64.to_be_bytes());
    f.extend([0x03, 0x00, 0x02, b'F']);
    utf(&mut f, "loadFactor");
    f.push(b'I');
    utf(&mut f, "threshold");
    f.extend([0x78, 0x70]);
    f.extend(0.75f32.to_be_bytes());
    f.extend(12u32.to_be_bytes());
    f.extend([0x77, 0x08]);
    f.extend(16u32.to_be_bytes());
    f.extend((entries.len() as u32).to_be_bytes());
    let mut class_written = false;
    let mut put = |f: &mut Vec<u8>, b: &Option<Vec<u8>>| match b {
        None => f.push(0x70),
        Some(b) => {
            f.push(0x75);
            if class_written {
                f.push(0x71);
                f.extend(0x7E_0002u32.to_be_bytes());
            } else {
                f.push(0x72);
                utf(f, "[B");
                f.extend(0xACF3_17F8_0608_54E0u64.to_be_bytes());
                f.extend([0x02, 0x00, 0x00, 0x78, 0x70]);
                class_written = true;
            }
            f.extend((b.len() as u32).to_be_bytes());
            f.extend(b);
        }
    };
    for (k, v) in entries {
        put(&mut f, &Some(k.clone()));
        put(&mut f, v);
    }
    f.push(0x78);
    f
}

fn utf(f: &mut Vec<u8>, s: &str) {
    f.extend((s.len() as u16).to_be_bytes());
    f.extend(s.as_bytes());
}

#[test]
fn a_standalone_offsets_file_is_read_and_anything_else_refused() {
    let entries = vec![
        (key("a", "s"), Some(VALUE.as_bytes().to_vec())),
        (key("b", "s"), None),
    ];
    let file = java_file(&entries);
    assert_eq!(read_offsets_file(&file).unwrap(), entries);
    assert_eq!(read_offsets_file(&java_file(&[])).unwrap(), vec![]);
    for cut in [3, 20, file.len() / 2, file.len() - 1] {
        let err = read_offsets_file(&file[..cut]).unwrap_err();
        assert!(err.at <= cut, "{err}");
    }
    let mut trailing = file.clone();
    trailing.push(0);
    assert!(
        read_offsets_file(&trailing)
            .unwrap_err()
            .detail
            .contains("after the map")
    );
    let mut other = file.clone();
    other[18] = b'X'; // java.util.XashMap
    assert!(
        read_offsets_file(&other)
            .unwrap_err()
            .detail
            .contains("XashMap")
    );
    assert!(read_offsets_file(br#"{"lsn":1}"#).is_err());
}

/// A file written by the e2e test's Kafka Connect 4.3.1 standalone worker running Debezium
/// 3.6.1 (`tests/e2e/debezium_cutover.rs`).
#[test]
fn a_real_connect_offsets_file_is_read() {
    // Three transactions of two rows each, then a graceful stop: the stored offset is that of
    // the last record, made before its transaction's COMMIT was read, so it names the end of
    // the second commit (the slot's confirmed_flush_lsn was the same, 0/3532E780).
    let file = include_bytes!("fixtures/standalone.offsets");
    let entries = read_offsets_file(file).unwrap();
    assert_eq!(entries.len(), 1);
    let o = DebeziumOffset::select(&entries, "cutfix", Some("t_cutfix")).unwrap();
    assert_eq!(o.lsn_commit, Some("0/3532E780".parse().unwrap()));
    assert_eq!(o.lsn, Some(Lsn(892_528_680)));
    assert_eq!(o.lsn_proc, o.lsn);
    assert_eq!(o.tx_id, Some(326_012));
    assert_eq!(o.proven().unwrap().complete_before, Lsn(0x3532_E780));
}

proptest! {
    #[test]
    fn any_map_round_trips_and_no_cut_of_it_is_accepted(
        entries in prop::collection::vec(
            (prop::collection::vec(any::<u8>(), 0..40),
             prop::option::of(prop::collection::vec(any::<u8>(), 0..40))),
            0..6),
    ) {
        let file = java_file(&entries);
        prop_assert_eq!(read_offsets_file(&file).unwrap(), entries);
        for cut in 0..file.len() {
            prop_assert!(read_offsets_file(&file[..cut]).is_err());
        }
    }
}
