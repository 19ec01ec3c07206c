use proptest::prelude::*;

use super::*;

#[test]
fn an_outage_of_136_s_with_five_errors_a_second_is_four_lines() {
    let mut o = Outage::default();
    let ms = Duration::from_millis;
    let mut said = Vec::new();
    for t in (0..136_000).step_by(200) {
        said.extend(o.error(ms(1000 + t)));
    }
    said.extend(o.up(ms(137_500)));
    assert_eq!(
        said,
        [
            Say::Down,
            Say::Still {
                for_: ms(60_000),
                errors: 301
            },
            Say::Still {
                for_: ms(120_000),
                errors: 601
            },
            Say::Back {
                after: ms(136_500),
                errors: 680
            },
        ]
    );
    assert!(!o.is_away());
    assert_eq!(o.up(ms(140_000)), None, "up while up says nothing");
}

proptest! {
    /// Whatever the sequence: every Down is followed (before the next Down) by a Back, the
    /// first error of an outage always says Down, and an outage of length T says at most
    /// T / REMIND_EVERY reminders.
    #[test]
    fn one_down_and_one_back_per_outage(
        events in prop::collection::vec((any::<bool>(), 0u64..30_000), 0..300),
    ) {
        let mut o = Outage::default();
        let mut now = Duration::ZERO;
        let mut away_since: Option<Duration> = None;
        let mut reminders = 0u64;
        for (error, gap) in events {
            now += Duration::from_millis(gap);
            if error {
                let said = o.error(now);
                match away_since {
                    None => {
                        prop_assert_eq!(said, Some(Say::Down));
                        away_since = Some(now);
                        reminders = 0;
                    }
                    Some(since) => {
                        let down_or_back = matches!(said, Some(Say::Down) | Some(Say::Back { .. }));
                        prop_assert!(!down_or_back, "{:?} during an outage", said);
                        if said.is_some() {
                            reminders += 1;
                        }
                        let at_most = (now - since).as_millis() / REMIND_EVERY.as_millis();
                        prop_assert!(u128::from(reminders) <= at_most);
                    }
                }
            } else {
                let said = o.up(now);
                prop_assert_eq!(said.is_some(), away_since.is_some());
                away_since = None;
            }
            prop_assert_eq!(o.is_away(), away_since.is_some());
        }
    }
}
