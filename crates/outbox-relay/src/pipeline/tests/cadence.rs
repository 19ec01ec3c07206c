//! When the loop writes checkpoints outside Kafka transactions: once per status interval, and
//! as soon as Kafka acknowledged `relay.checkpoint_bytes` since the last one (the progress
//! rule's `checkpoint_volume_due`), so that a crash in a catch-up re-sends about that much, not
//! a status interval's worth. On the paused clock with the in-memory sink, which reports 10
//! bytes per record.

use relay_core::checkpoint::Checkpoint;

use super::{
    memory::MemorySink,
    paused::{Script, memory_config, run_with, until},
    *,
};

/// Transactions in the script.
const N: u64 = 40;

/// Transaction `i`'s commit LSN and end LSN.
fn lsns(i: u64) -> (u64, u64) {
    let commit = 0x1000 + i * 0x20;
    (commit, commit + 0x10)
}

/// `N` transactions of one outbox row each.
fn transactions() -> Script {
    let mut ev = VecDeque::new();
    for i in 0..N {
        let (at, end) = lsns(i);
        ev.push_back(begin(at));
        if i == 0 {
            ev.push_back(xlog(relation(100, "public", "outbox", &outbox_columns())));
        }
        ev.extend([outbox_row(&format!("e{i}")), commit(at, end)]);
    }
    Script(ev, None)
}

/// The covered LSNs of the checkpoints written while Kafka acknowledges the `N` records one at
/// a time, under `checkpoint_bytes`, with a status interval longer than the run.
async fn covered_while_acknowledging(checkpoint_bytes: u64) -> Vec<Lsn> {
    let cfg = memory_config(&format!(
        "checkpoint_topic = \"cp\"\n[relay]\nstatus_interval_ms = 600000\n\
         checkpoint_bytes = {checkpoint_bytes}\n"
    ));
    let id = Identity::new(&cfg, "42", 1);
    let (sink, mut reports) = MemorySink::new(false, false, Duration::ZERO);
    let mut covered = Vec::new();
    let ended = run_with(
        &cfg,
        &sink,
        &mut reports,
        transactions(),
        Some(id),
        |_, stop| {
            let (sink, covered) = (&sink, &mut covered);
            async move {
                until(sink, N as usize).await;
                for _ in 0..N {
                    sink.report(|i, _| i == 0, None);
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                // Before the stop, which writes one more.
                *covered = sink
                    .checkpoints()
                    .iter()
                    .map(|c| Checkpoint::from_json(c).unwrap().covered_lsn)
                    .collect();
                let _ = stop.send(true);
            }
        },
    )
    .await;
    ended.result.unwrap();
    assert_eq!(ended.confirmed, Lsn(lsns(N - 1).1), "everything confirmed");
    covered
}

#[tokio::test(start_paused = true)]
async fn outside_transactions_a_checkpoint_follows_every_checkpoint_bytes_acknowledged() {
    // Every 4 records (40 bytes): the first acknowledgement finds no checkpoint yet (due by
    // time), then each fourth after it.
    let by_volume = covered_while_acknowledging(40).await;
    let expected: Vec<Lsn> = (0..N).step_by(4).map(|i| Lsn(lsns(i).1)).collect();
    assert_eq!(by_volume, expected);
    // By time alone: the first, and none more within the status interval.
    let by_time = covered_while_acknowledging(0).await;
    assert_eq!(by_time, [Lsn(lsns(0).1)]);
}
