//! The topic side of the retention check (feature `kafka`): reads `retention.ms`, `segment.ms`
//! and `cleanup.policy` of the consumer's topics with the Kafka admin API (DescribeConfigs) and
//! applies [`decide`].

use std::time::Duration;

use rdkafka::{
    ClientConfig,
    admin::{AdminClient, AdminOptions, ResourceSpecifier},
    client::DefaultClientContext,
};

use crate::{Allowed, Error, TopicRetention, decide};

/// Reads the settings of `topics`; `config` is the client configuration (at least
/// `bootstrap.servers`, plus the security settings the cluster needs).
pub async fn topic_retention(
    config: &ClientConfig,
    topics: &[&str],
) -> Result<Vec<TopicRetention>, Error> {
    let kafka_err = |topic: &str| {
        let topic = topic.to_string();
        move |source| Error::Kafka { topic, source }
    };
    let first = topics.first().copied().unwrap_or_default();
    let admin: AdminClient<DefaultClientContext> = config.create().map_err(kafka_err(first))?;
    let specs: Vec<ResourceSpecifier<'_>> =
        topics.iter().map(|t| ResourceSpecifier::Topic(t)).collect();
    let opts = AdminOptions::new().request_timeout(Some(Duration::from_secs(30)));
    let results = admin
        .describe_configs(&specs, &opts)
        .await
        .map_err(kafka_err(first))?;
    let mut out = Vec::with_capacity(topics.len());
    for (topic, res) in topics.iter().zip(results) {
        let res = res.map_err(|code| Error::TopicConfig {
            topic: topic.to_string(),
            detail: format!("Kafka refused DescribeConfigs: {code}"),
        })?;
        let get = |key: &str| -> Result<String, Error> {
            res.get(key)
                .and_then(|e| e.value.clone())
                .ok_or_else(|| Error::TopicConfig {
                    topic: topic.to_string(),
                    detail: format!("no value for {key}"),
                })
        };
        let number = |key: &str| -> Result<i64, Error> {
            let v = get(key)?;
            v.parse().map_err(|_| Error::TopicConfig {
                topic: topic.to_string(),
                detail: format!("{key} = {v:?} is not a number"),
            })
        };
        out.push(TopicRetention {
            topic: topic.to_string(),
            retention_ms: number("retention.ms")?,
            segment_ms: number("segment.ms")?,
            compacted: get("cleanup.policy")?
                .split(',')
                .any(|p| p.trim() == "compact"),
        });
    }
    Ok(out)
}

/// [`topic_retention`] then [`decide`]: the [`Allowed`] the retention job needs, or why not.
///
/// ```no_run
/// # async fn demo(pg: &tokio_postgres::Client) -> Result<(), outbox_inbox::Error> {
/// use std::time::Duration;
/// let mut kafka = rdkafka::ClientConfig::new();
/// kafka.set("bootstrap.servers", "127.0.0.1:9092");
/// let week = Duration::from_secs(7 * 86_400);
/// let allowed = outbox_inbox::kafka::check_retention(&kafka, &["outbox.event.account"], 3 * week, None).await?;
/// outbox_inbox::RetentionJob::new().run(pg, &allowed).await?;
/// # Ok(()) }
/// ```
pub async fn check_retention(
    config: &ClientConfig,
    topics: &[&str],
    retention: Duration,
    window: Option<Duration>,
) -> Result<Allowed, Error> {
    let settings = topic_retention(config, topics).await?;
    Ok(decide(retention, &settings, window)?)
}
