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
