use super::{connections::StartAt, section::ValueAs, *};

const MIN: &str = "[kafka]\ngroup_id = \"g\"\ntopics = [\"t\"]\n[apply]\nconsumer = \"c\"\n\
                   [[handler]]\nevent_type = \"E\"\nsql = \"SELECT :value\"\n";

fn load(toml: &str) -> Result<ApplyConfig, String> {
    ApplyConfig::from_test_toml(toml)
}

#[test]
fn defaults_are_the_documented_ones() {
    let c = load(MIN).unwrap();
    assert_eq!(c.kafka.start, StartAt::Earliest);
    assert_eq!(c.apply.on_failure, OnFailure::Halt);
    assert_eq!(c.apply.offsets_table, "public.outbox_apply_offsets");
    assert_eq!(c.http.listen.port(), 9560);
    assert_eq!(c.handler[0].value, ValueAs::Jsonb);
}

#[test]
fn mistakes_name_their_key() {
    for (toml, needle) in [
        (
            MIN.replace("topics = [\"t\"]\n", ""),
            "kafka.topics: set kafka.topics or",
        ),
        (
            MIN.replace("consumer = \"c\"", "consumer = \"c\"\nbatch = 3"),
            "apply.batch: unknown field",
        ),
        (
            MIN.replace("public.inbox", "x")
                .replace("[apply]\n", "[apply]\ninbox_table = \"inbox\"\n"),
            "apply.inbox_table: \"inbox\": write schema.table",
        ),
        (
            format!("{MIN}[[handler]]\nevent_type = \"E\"\nsql = \"SELECT 1\"\n"),
            "handler[1].event_type",
        ),
        (
            MIN.replace("SELECT :value", "SELECT :vaule"),
            "handler[0].sql: unknown parameter :vaule",
        ),
        (
            MIN.replace("[kafka]\n", "[kafka]\nstart = \"newest\"\n"),
            "kafka.start = \"newest\"",
        ),
    ] {
        let e = load(&toml).unwrap_err();
        assert!(e.contains(needle), "{toml}\n -> {e}\n wanted {needle}");
    }
}
