//! The ids of a table that only ever grows, in ascending order, as the
//! in-memory copies keep them (see `catalogue.rs`, `orders.rs`).

/// The ids, ascending. SQLite's AUTOINCREMENT hands out consecutive ids
/// when nothing is deleted, so they are usually a range and cost nothing
/// per row; after the first gap they are listed.
pub(super) enum Ids {
    Range { first: i64, len: usize },
    Listed(Vec<i64>),
}

impl Default for Ids {
    fn default() -> Ids {
        Ids::Range { first: 0, len: 0 }
    }
}

impl Ids {
    pub(super) fn len(&self) -> usize {
        match self {
            Ids::Range { len, .. } => *len,
            Ids::Listed(ids) => ids.len(),
        }
    }

    pub(super) fn last(&self) -> Option<i64> {
        self.len().checked_sub(1).map(|at| self.at(at))
    }

    pub(super) fn at(&self, at: usize) -> i64 {
        match self {
            Ids::Range { first, .. } => first + at as i64,
            Ids::Listed(ids) => ids[at],
        }
    }

    /// The position of the first id greater than `after`.
    pub(super) fn first_after(&self, after: i64) -> usize {
        match self {
            Ids::Range { first, len } => {
                let past = i128::from(after) - i128::from(*first) + 1;
                past.clamp(0, *len as i128) as usize
            }
            Ids::Listed(ids) => ids.partition_point(|&id| id <= after),
        }
    }

    pub(super) fn position(&self, id: i64) -> Option<usize> {
        match self {
            Ids::Range { first, len } => {
                let at = usize::try_from(id.checked_sub(*first)?).ok()?;
                (at < *len).then_some(at)
            }
            Ids::Listed(ids) => ids.binary_search(&id).ok(),
        }
    }

    /// Appends `id`, which must be larger than every id before it.
    pub(super) fn push(&mut self, id: i64) {
        assert!(self.last().is_none_or(|last| last < id), "ids must ascend");
        match self {
            Ids::Range { len: 0, .. } => *self = Ids::Range { first: id, len: 1 },
            Ids::Range { first, len } if first.checked_add(*len as i64) == Some(id) => *len += 1,
            Ids::Range { first, len } => {
                let mut ids: Vec<i64> = (0..*len as i64).map(|at| *first + at).collect();
                ids.push(id);
                *self = Ids::Listed(ids);
            }
            Ids::Listed(ids) => ids.push(id),
        }
    }
}
