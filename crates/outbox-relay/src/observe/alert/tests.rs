//! Alert evaluation: thresholds, hysteresis, transitions and messages.
use super::*;
use crate::config::ExtendedLevel;

const MIB: u64 = 1 << 20;

fn cfg() -> AlertsConfig {
    AlertsConfig {
        retained_wal_warning_bytes: 100 * MIB,
        retained_wal_critical_bytes: 1000 * MIB,
        retained_wal_warning_ratio: 0.5,
        retained_wal_critical_ratio: 0.8,
        time_lag_warning_secs: 60,
        time_lag_critical_secs: 600,
        ..AlertsConfig::default()
    }
}

fn obs(retained_mib: u64) -> Observation {
    Observation {
        retained_wal_bytes: Some(retained_mib * MIB),
        max_slot_wal_keep_size: None,
        time_lag: Some(Duration::ZERO),
        wal_status: Some(WalStatus::Reserved),
        invalidation: None,
        confirmed_flush: Some(Lsn(0x1930468)),
        ..Observation::default()
    }
}

fn level(kind: AlertKind, o: &Observation) -> Option<Severity> {
    evaluate(&cfg(), o)[kind as usize].level
}

#[test]
fn retained_wal_in_bytes_warns_then_goes_critical() {
    let k = AlertKind::RetainedWal;
    assert_eq!(level(k, &obs(99)), None);
    assert_eq!(level(k, &obs(100)), Some(Severity::Warning));
    assert_eq!(level(k, &obs(1000)), Some(Severity::Critical));
}

#[test]
fn retained_wal_as_a_fraction_of_max_slot_wal_keep_size() {
    let k = AlertKind::RetainedWal;
    let mut o = obs(40);
    o.max_slot_wal_keep_size = Some(64 * MIB);
    assert_eq!(level(k, &o), Some(Severity::Warning), "40 of 64 MiB is 62%");
    o.retained_wal_bytes = Some(52 * MIB);
    assert_eq!(
        level(k, &o),
        Some(Severity::Critical),
        "52 of 64 MiB is 81%"
    );
    o.max_slot_wal_keep_size = None;
    assert_eq!(
        level(k, &o),
        None,
        "unlimited: only the byte thresholds apply"
    );
    let f = &evaluate(&cfg(), &obs(150))[0];
    assert!(
        f.summary.contains("150.0 MiB") && f.summary.contains("unlimited"),
        "{f:?}"
    );
}

#[test]
fn zero_disables_a_threshold() {
    let c = AlertsConfig {
        retained_wal_warning_bytes: 0,
        retained_wal_critical_bytes: 0,
        retained_wal_warning_ratio: 0.0,
        retained_wal_critical_ratio: 0.0,
        time_lag_warning_secs: 0,
        time_lag_critical_secs: 0,
        ..AlertsConfig::default()
    };
    let mut o = obs(1 << 20);
    o.max_slot_wal_keep_size = Some(MIB);
    o.time_lag = Some(Duration::from_secs(1 << 30));
    assert!(evaluate(&c, &o).iter().all(|f| f.level.is_none()));
}

#[test]
fn time_lag_levels_and_unknown_lag() {
    let k = AlertKind::TimeLag;
    let mut o = obs(0);
    o.time_lag = Some(Duration::from_secs(59));
    assert_eq!(level(k, &o), None);
    o.time_lag = Some(Duration::from_secs(60));
    assert_eq!(level(k, &o), Some(Severity::Warning));
    o.time_lag = Some(Duration::from_secs(601));
    assert_eq!(level(k, &o), Some(Severity::Critical));
    o.time_lag = None;
    assert_eq!(level(k, &o), None);
}

#[test]
fn wal_status_leaving_reserved() {
    let k = AlertKind::WalStatus;
    let mut o = obs(0);
    for (s, want) in [
        (WalStatus::Reserved, None),
        (WalStatus::Extended, Some(Severity::Warning)),
        (WalStatus::Unreserved, Some(Severity::Critical)),
        (WalStatus::Lost, Some(Severity::Critical)),
    ] {
        o.wal_status = Some(s.clone());
        assert_eq!(level(k, &o), want, "{s}");
    }
    let c = AlertsConfig {
        wal_status_extended: ExtendedLevel::Off,
        ..cfg()
    };
    o.wal_status = Some(WalStatus::Extended);
    assert_eq!(evaluate(&c, &o)[2].level, None);
    o.wal_status = Some(WalStatus::Lost);
    let f = &evaluate(&c, &o)[2];
    assert!(
        f.summary.contains("lost") && f.action.contains("--recreate-slot"),
        "{f:?}"
    );
    assert!(f.summary.contains("committed after 0/1930468"), "{f:?}");
}

#[test]
fn one_transition_per_change_of_level_and_none_while_unchanged() {
    let mut a = Alerts::new(cfg());
    let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
    assert!(a.observe(&obs(10), t0).is_empty());

    let fired = a.observe(&obs(200), t0);
    assert_eq!(fired.len(), 1);
    assert_eq!(
        (fired[0].kind, fired[0].from, fired[0].to),
        (AlertKind::RetainedWal, None, Some(Severity::Warning))
    );
    assert!(
        a.observe(&obs(300), t0 + Duration::from_secs(5)).is_empty(),
        "same level"
    );
    assert!(
        a.active()[0].summary.contains("300.0 MiB"),
        "summary follows the value"
    );

    let up = a.observe(&obs(2000), t0 + Duration::from_secs(10));
    assert_eq!(up.len(), 1);
    assert_eq!(
        (up[0].from, up[0].to),
        (Some(Severity::Warning), Some(Severity::Critical))
    );
    assert_eq!(up[0].since, Some(t0), "escalation keeps the start time");
    assert!(
        up[0]
            .message()
            .starts_with("alert_firing: [critical] retained_wal (was warning)")
    );
    assert_eq!(a.level(AlertKind::RetainedWal), Some(Severity::Critical));

    let down = a.observe(&obs(1), t0 + Duration::from_secs(20));
    assert_eq!(down.len(), 1);
    assert!(down[0].is_resolved());
    assert!(
        down[0]
            .message()
            .starts_with("alert_resolved: retained_wal: the slot retains 1.0 MiB")
    );
    assert!(a.active().is_empty());
}

#[test]
fn firing_message_says_what_is_wrong_and_what_to_do() {
    let mut a = Alerts::new(cfg());
    let mut o = obs(0);
    o.wal_status = Some(WalStatus::Unreserved);
    o.time_lag = Some(Duration::from_secs(3725));
    let t = a.observe(&o, SystemTime::UNIX_EPOCH);
    assert_eq!(t.len(), 2);
    let lag = t
        .iter()
        .find(|t| t.kind == AlertKind::TimeLag)
        .unwrap()
        .message();
    assert!(
        lag.contains("1h 2m 5s old") && lag.contains("What to do: check the relay log"),
        "{lag}"
    );
    let ws = t
        .iter()
        .find(|t| t.kind == AlertKind::WalStatus)
        .unwrap()
        .message();
    assert!(
        ws.contains("wal_status = unreserved") && ws.contains("max_slot_wal_keep_size"),
        "{ws}"
    );

    // unreserved -> lost stays critical but is news: one more transition.
    o.wal_status = Some(WalStatus::Lost);
    let t = a.observe(&o, SystemTime::UNIX_EPOCH);
    assert_eq!(t.len(), 1, "{t:?}");
    let lost = t[0].message();
    assert!(
        lost.starts_with(
            "alert_firing: [critical] wal_status (was critical): the slot was invalidated"
        ),
        "{lost}"
    );
    assert!(a.observe(&o, SystemTime::UNIX_EPOCH).is_empty());
}

#[test]
fn human_units() {
    assert_eq!(human_bytes(512), "512 B");
    assert_eq!(human_bytes(1536), "1.5 KiB");
    assert_eq!(human_bytes(64 * MIB), "64.0 MiB");
    assert_eq!(human_duration(Duration::from_millis(1500)), "1.5s");
    assert_eq!(human_duration(Duration::from_secs(61)), "1m 1s");
}

/// The reported case: Kafka down, WAL at ~3 MB/s, the first forecast said "~11 min" for a slot
/// lost 31 s later, and no notification followed as the estimate fell. A firing forecast whose
/// estimate drops below half of the last one sent is sent again, at the same level.
#[test]
fn a_forecast_falling_below_half_of_the_last_sent_is_sent_again() {
    let cfg = AlertsConfig {
        slot_forecast_warning_secs: 3600,
        slot_forecast_critical_secs: 900,
        ..cfg()
    };
    let mut alerts = Alerts::new(cfg);
    let now = SystemTime::UNIX_EPOCH;
    let forecast = |secs: Option<f64>| Observation {
        seconds_to_loss: secs,
        ..obs(1)
    };
    let sent = |alerts: &mut Alerts, secs: Option<f64>| -> Vec<Transition> {
        alerts
            .observe(&forecast(secs), now)
            .into_iter()
            .filter(|t| t.kind == AlertKind::SlotForecast)
            .collect()
    };
    let t = sent(&mut alerts, Some(660.0));
    assert_eq!(t.len(), 1, "fires");
    assert_eq!(t[0].to, Some(Severity::Critical));
    assert!(sent(&mut alerts, Some(500.0)).is_empty(), "not yet half");
    assert!(sent(&mut alerts, Some(331.0)).is_empty(), "not yet half");
    let t = sent(&mut alerts, Some(320.0));
    assert_eq!(t.len(), 1, "below half of 660: sent again");
    assert_eq!(
        (t[0].from, t[0].to),
        (Some(Severity::Critical), Some(Severity::Critical))
    );
    assert!(t[0].summary.contains("~5 min"), "{}", t[0].summary);
    assert!(
        t[0].message().contains("slot_forecast (was critical)"),
        "{}",
        t[0].message()
    );
    // Half of the new one is the next threshold.
    assert!(sent(&mut alerts, Some(200.0)).is_empty());
    assert_eq!(sent(&mut alerts, Some(150.0)).len(), 1);
    // A rising estimate is not news; a resolve clears the memory.
    assert!(sent(&mut alerts, Some(400.0)).is_empty());
    assert_eq!(sent(&mut alerts, None)[0].to, None);
    assert_eq!(sent(&mut alerts, Some(800.0)).len(), 1, "fires again");
    assert!(sent(&mut alerts, Some(401.0)).is_empty());
}
