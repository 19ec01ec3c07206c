//! What every Kafka client of the relay is built from: the brokers, `kafka.properties` and the
//! first-class security options.

use rdkafka::{ClientConfig, config::RDKafkaLogLevel};

use crate::{config::KafkaConfig, error::RelayError};

/// What every Kafka client of the relay shares (producer, checkpoint reader, admin): the
/// brokers, the extra properties and the security options.
pub(crate) fn client_config(cfg: &KafkaConfig) -> Result<ClientConfig, RelayError> {
    let mut c = ClientConfig::new();
    for (k, v) in &cfg.properties {
        c.set(k, v.expose());
    }
    security_properties(cfg, &mut c)?;
    c.set("bootstrap.servers", &cfg.brokers);
    // librdkafka writes the contexts named in `debug` at its debug level, which rdkafka
    // filters out unless told otherwise: asking for `debug` means wanting to see it.
    if cfg.properties.contains_key("debug") {
        c.set_log_level(RDKafkaLogLevel::Debug);
    }
    Ok(c)
}

/// The first-class security options as librdkafka properties (validated by the config).
fn security_properties(cfg: &KafkaConfig, c: &mut ClientConfig) -> Result<(), RelayError> {
    c.set("security.protocol", cfg.security_protocol.as_librdkafka());
    if let Some(m) = cfg.sasl_mechanism {
        c.set("sasl.mechanisms", m.as_librdkafka());
    }
    if let Some(u) = &cfg.sasl_username {
        c.set("sasl.username", u);
    }
    if let Some(pw) = cfg.sasl_password()? {
        c.set("sasl.password", pw.expose());
    }
    if let Some(ca) = &cfg.ssl_ca_location {
        c.set("ssl.ca.location", ca.to_string_lossy());
    }
    Ok(())
}

/// A short-lived librdkafka client (the checkpoint topic's admin client and reader) destroyed
/// on a thread of its own when dropped. Destroying one takes ~100 ms whatever it did (rdkafka's
/// admin polling thread wakes every 100 ms to see it should stop; a consumer's broker threads
/// wind down on a similar turn), and a start would wait for each in turn before it streams.
pub(crate) struct Aside<T: Send + 'static>(Option<T>);

impl<T: Send + 'static> Aside<T> {
    pub(crate) fn new(client: T) -> Self {
        Self(Some(client))
    }
}

impl<T: Send + 'static> std::ops::Deref for Aside<T> {
    type Target = T;

    fn deref(&self) -> &T {
        self.0.as_ref().expect("present until dropped")
    }
}

impl<T: Send + 'static> Drop for Aside<T> {
    fn drop(&mut self) {
        if let Some(client) = self.0.take() {
            // If no thread can be started, the closure, and the client with it, is dropped
            // here: destroyed as any client is.
            let _ = std::thread::Builder::new()
                .name("kafka-client-close".into())
                .spawn(move || drop(client));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Aside;

    /// Tells on which thread it was dropped.
    struct Tells(std::sync::mpsc::Sender<Option<String>>);

    impl Drop for Tells {
        fn drop(&mut self) {
            let _ = self
                .0
                .send(std::thread::current().name().map(str::to_string));
        }
    }

    #[test]
    fn an_aside_client_is_destroyed_on_a_thread_of_its_own() {
        let (tx, rx) = std::sync::mpsc::channel();
        let here = std::thread::current().name().map(str::to_string);
        drop(Aside::new(Tells(tx)));
        let there = rx.recv().expect("dropped once");
        assert_eq!(there.as_deref(), Some("kafka-client-close"));
        assert_ne!(there, here);
    }
}
