//! A Kafka record as the applier keeps it: owned (it crosses from the consumer's thread to a
//! partition's task), with its event id and type read from the configured headers.

use rdkafka::{
    Message, Timestamp,
    message::{BorrowedMessage, Headers},
};

/// One record of a partition.
#[derive(Debug, Clone)]
pub(crate) struct Record {
    pub(crate) topic: String,
    pub(crate) partition: i32,
    pub(crate) offset: i64,
    pub(crate) key: Option<Vec<u8>>,
    pub(crate) value: Option<Vec<u8>>,
    pub(crate) headers: Vec<(String, Option<Vec<u8>>)>,
    /// Milliseconds since the epoch (create or log-append time), if the record has one.
    pub(crate) timestamp_ms: Option<i64>,
    /// The event id header's value, if present and UTF-8.
    pub(crate) event_id: Option<String>,
    /// The event type header's value, if present and UTF-8.
    pub(crate) event_type: Option<String>,
}

impl Record {
    pub(crate) fn from_message(
        m: &BorrowedMessage<'_>,
        id_header: &str,
        type_header: &str,
    ) -> Record {
        let headers: Vec<(String, Option<Vec<u8>>)> = m
            .headers()
            .map(|h| {
                h.iter()
                    .map(|h| (h.key.to_string(), h.value.map(<[u8]>::to_vec)))
                    .collect()
            })
            .unwrap_or_default();
        let find = |name: &str| {
            headers
                .iter()
                .find(|(k, _)| k == name)
                .and_then(|(_, v)| v.as_deref())
                .and_then(|v| std::str::from_utf8(v).ok())
                .map(str::to_string)
        };
        let timestamp_ms = match m.timestamp() {
            Timestamp::NotAvailable => None,
            Timestamp::CreateTime(t) | Timestamp::LogAppendTime(t) => Some(t),
        };
        Record {
            topic: m.topic().to_string(),
            partition: m.partition(),
            offset: m.offset(),
            key: m.key().map(<[u8]>::to_vec),
            value: m.payload().map(<[u8]>::to_vec),
            event_id: find(id_header),
            event_type: find(type_header),
            headers,
            timestamp_ms,
        }
    }

    /// `topic[partition]@offset`, for messages.
    pub(crate) fn at(&self) -> String {
        format!("{}[{}]@{}", self.topic, self.partition, self.offset)
    }

    /// The headers as a JSON object of text values (`null` for a header without a value; the
    /// last of repeated names wins; bytes that are not UTF-8 are replaced).
    pub(crate) fn headers_json(&self) -> String {
        let map: serde_json::Map<String, serde_json::Value> = self
            .headers
            .iter()
            .map(|(k, v)| {
                let v = v.as_deref().map_or(serde_json::Value::Null, |b| {
                    serde_json::Value::String(String::from_utf8_lossy(b).into_owned())
                });
                (k.clone(), v)
            })
            .collect();
        serde_json::Value::Object(map).to_string()
    }
}
