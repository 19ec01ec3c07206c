//! The sink's delivery reports, as the pipeline receives them: every report comes out of
//! [`Reports`], attributed by the sink, so that what a report means is decided in one place
//! (`Pipeline::on_report`) whichever wait received it (the loop, a commit, a suspect record
//! sent alone, the drain).

use tokio::sync::mpsc;

use crate::sink::{Delivered, Sink};

/// The sink's report channel. Every report the pipeline reads comes out of here, with the
/// cause the sink knows of ([`Sink::attribute`]: a purged record of a refused topic).
pub(crate) struct Reports(mpsc::UnboundedReceiver<Delivered>);

impl Reports {
    pub(crate) fn new(rx: mpsc::UnboundedReceiver<Delivered>) -> Self {
        Self(rx)
    }

    /// The next report (`None`: the producer is gone).
    pub(super) async fn next(&mut self, sink: &impl Sink) -> Option<Delivered> {
        self.0.recv().await.map(|d| sink.attribute(d))
    }

    /// No report is ready now.
    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// A report that is ready now.
    pub(super) fn ready(&mut self, sink: &impl Sink) -> Option<Delivered> {
        self.0.try_recv().ok().map(|d| sink.attribute(d))
    }
}
