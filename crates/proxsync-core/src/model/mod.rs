//! The values the pure layers decide on, apart from the code that fills them: what the state
//! database records of each spec (`record`), what a cycle observed of each site (`view`), and
//! a rewinding commit the source applies (`rewind`). `store` keeps the records, `observe`
//! makes the views and `source` the rewind; the gate, the planner and render import them from
//! here, never from those modules. Execute's verdicts are here too, for `words` to say: what
//! an action waits for (`wait`), what blocks it until a person acts (`blocked`), what a
//! create lacks before anything is made (`preflight`) and what a spec's history says happened
//! (`note`).

pub mod blocked;
pub mod health;
pub mod note;
pub mod preflight;
pub mod record;
pub(crate) mod rewind;
pub mod view;
pub mod wait;

pub use blocked::{Blocked, Interrupted, Shows, SlotFor, Stranger};
pub use note::Note;
pub use preflight::Unfit;
pub use record::*;
pub use rewind::RewindBatch;
pub use view::*;
pub use wait::{After, Wait};
