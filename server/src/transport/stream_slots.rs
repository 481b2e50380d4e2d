//! How many dashboard streams each console session holds open, so one session (or one stolen
//! cookie) cannot open streams without end: each costs a task and a frame every second.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tower_sessions::session::Id;

/// The most dashboard streams one session may hold open at once.
pub const STREAMS_PER_SESSION: usize = 4;

/// Open streams by session.
#[derive(Debug, Clone, Default)]
pub struct StreamSlots(Arc<Mutex<HashMap<Id, usize>>>);

impl StreamSlots {
    /// A slot for one more stream of `session`, or `None` when it already holds
    /// [`STREAMS_PER_SESSION`]. The slot frees itself when dropped.
    pub fn take(&self, session: Id) -> Option<StreamSlot> {
        let mut open = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let count = open.entry(session).or_insert(0);
        if *count >= STREAMS_PER_SESSION {
            return None;
        }
        *count += 1;
        Some(StreamSlot {
            slots: self.clone(),
            session,
        })
    }

    /// How many streams `session` holds open now.
    pub fn open(&self, session: Id) -> usize {
        let open = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        open.get(&session).copied().unwrap_or(0)
    }
}

/// One open stream's place; dropping it frees the place.
#[derive(Debug)]
pub struct StreamSlot {
    slots: StreamSlots,
    session: Id,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut open = self.slots.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = open.get_mut(&self.session) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.session);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_holds_at_most_its_streams_and_gets_them_back() {
        let slots = StreamSlots::default();
        let (a, b) = (Id::default(), Id::default());
        let held: Vec<StreamSlot> = (0..STREAMS_PER_SESSION)
            .map(|_| slots.take(a).expect("a free slot"))
            .collect();
        assert!(slots.take(a).is_none());
        // Another session is not affected.
        assert!(slots.take(b).is_some());
        drop(held);
        assert_eq!(slots.open(a), 0);
        assert!(slots.take(a).is_some());
    }
}
