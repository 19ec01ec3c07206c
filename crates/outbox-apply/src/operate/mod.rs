//! What the operator sees and does beside the applying path: `apply status` ([`status`]), the
//! console's view of a running applier ([`console`]) and the `/status.json` document both
//! share ([`document`]), and `apply redrive` ([`redrive`]). Nothing on the path uses it.

pub(crate) mod console;
mod document;
pub(crate) mod redrive;
pub(crate) mod status;
