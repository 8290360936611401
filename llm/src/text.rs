//! Cutting text to a length: the one place anvil shortens a string for a person or a model
//! (provider error bodies, tool output, previews, call lines, graders' output tails,
//! instruction files).
//!
//! A cut always falls on a character boundary, whatever unit the length counts: a shortened
//! text is still valid UTF-8 with no character split in half. A [`Limit`] says how long a text
//! may be and which part of a longer one survives; [`Limit::apply`] returns the kept parts and
//! how much was left out, and the caller says where the cut was in its own words
//! ([`Truncated::with_marker`], or a note naming [`Truncated::omitted`]).

use std::borrow::Cow;

/// What a length counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Characters (Unicode scalar values): what a person reads and what a model's budget is
    /// written in.
    Chars,
    /// UTF-8 bytes: what a size cap on a file or a message means.
    Bytes,
}

/// Which part of a text longer than its limit is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// The beginning.
    Head,
    /// The end (where a test run's summary or a compiler's last error is).
    Tail,
    /// Both ends, the middle cut out. The tail gets the larger half of an odd budget.
    HeadAndTail,
}

/// How long a text may be, and what of a longer one is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    max: usize,
    unit: Unit,
    keep: Keep,
    room: usize,
}

impl Limit {
    /// At most `max` characters, keeping the head.
    pub const fn chars(max: usize) -> Self {
        Self {
            max,
            unit: Unit::Chars,
            keep: Keep::Head,
            room: 0,
        }
    }

    /// At most `max` bytes, keeping the head; never splits a character, so a cut text may be a
    /// few bytes shorter than `max`.
    pub const fn bytes(max: usize) -> Self {
        Self {
            max,
            unit: Unit::Bytes,
            keep: Keep::Head,
            room: 0,
        }
    }

    /// Keeps `keep` of a text that is too long.
    pub const fn keep(self, keep: Keep) -> Self {
        Self { keep, ..self }
    }

    /// Leaves `room` units of `max` for the marker the caller puts where the cut is: a text
    /// longer than `max` keeps `max - room` units, so the kept text and a marker of `room` units
    /// together fit in `max`. A text within `max` is still kept whole.
    pub const fn room(self, room: usize) -> Self {
        Self { room, ..self }
    }

    /// Cuts `s` to this limit.
    pub fn apply(self, s: &str) -> Truncated<'_> {
        let len = match self.unit {
            Unit::Chars => s.chars().count(),
            Unit::Bytes => s.len(),
        };
        if len <= self.max {
            return Truncated {
                head: s,
                tail: "",
                omitted: 0,
            };
        }
        let budget = self.max.saturating_sub(self.room);
        let (head_units, tail_units) = match self.keep {
            Keep::Head => (budget, 0),
            Keep::Tail => (0, budget),
            Keep::HeadAndTail => (budget / 2, budget - budget / 2),
        };
        // `len > max >= budget = head_units + tail_units`, so the two parts never overlap.
        let (head_end, tail_start) = match self.unit {
            Unit::Chars => (char_offset(s, head_units), char_offset(s, len - tail_units)),
            Unit::Bytes => (
                s.floor_char_boundary(head_units),
                s.ceil_char_boundary(len - tail_units),
            ),
        };
        let omitted = match self.unit {
            Unit::Chars => len - head_units - tail_units,
            Unit::Bytes => tail_start - head_end,
        };
        Truncated {
            head: &s[..head_end],
            tail: &s[tail_start..],
            omitted,
        }
    }
}

/// The byte offset of the `n`th character of `s` (its length when `s` has fewer).
fn char_offset(s: &str, n: usize) -> usize {
    s.char_indices().nth(n).map_or(s.len(), |(i, _)| i)
}

/// A text cut to a [`Limit`]: the kept beginning and end, and how much of the middle went.
/// When nothing was cut, `head` is the whole text, `tail` is empty and `omitted` is 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Truncated<'a> {
    /// The kept beginning (empty when only the tail is kept).
    pub head: &'a str,
    /// The kept end (empty when only the head is kept, or nothing was cut).
    pub tail: &'a str,
    /// Units (of the limit's [`Unit`]) left out between `head` and `tail`.
    pub omitted: usize,
}

impl<'a> Truncated<'a> {
    /// Whether anything was left out.
    pub fn is_cut(&self) -> bool {
        self.omitted > 0
    }

    /// The kept text with `marker` where the cut was (`""` for none); the text itself, not
    /// copied, when nothing was cut.
    pub fn with_marker(&self, marker: &str) -> Cow<'a, str> {
        if !self.is_cut() {
            return Cow::Borrowed(self.head);
        }
        Cow::Owned([self.head, marker, self.tail].concat())
    }
}

/// `s` in at most `max` characters for one line on a screen: a longer one keeps its first
/// `max - 1` and ends in `…`.
pub fn ellipsize(s: &str, max: usize) -> Cow<'_, str> {
    if max == 0 {
        return Cow::Borrowed("");
    }
    Limit::chars(max).room(1).apply(s).with_marker("…")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn units(s: &str, unit: Unit) -> usize {
        match unit {
            Unit::Chars => s.chars().count(),
            Unit::Bytes => s.len(),
        }
    }

    #[test]
    fn a_text_within_the_limit_is_kept_whole_and_not_copied() {
        for limit in [
            Limit::chars(5),
            Limit::bytes(5),
            Limit::chars(5).keep(Keep::Tail).room(3),
            Limit::chars(5).keep(Keep::HeadAndTail).room(5),
        ] {
            let t = limit.apply("hello");
            assert!(!t.is_cut());
            assert!(matches!(t.with_marker("…"), Cow::Borrowed(_)));
        }
        assert_eq!(
            Limit::chars(5).apply("hello"),
            Truncated {
                head: "hello",
                tail: "",
                omitted: 0
            }
        );
    }

    #[test]
    fn each_keep_takes_its_part() {
        let s = "0123456789";
        assert_eq!(
            Limit::chars(4).apply(s),
            Truncated {
                head: "0123",
                tail: "",
                omitted: 6
            }
        );
        assert_eq!(
            Limit::chars(4).keep(Keep::Tail).apply(s),
            Truncated {
                head: "",
                tail: "6789",
                omitted: 6
            }
        );
        assert_eq!(
            Limit::chars(5).keep(Keep::HeadAndTail).apply(s),
            Truncated {
                head: "01",
                tail: "789",
                omitted: 5
            }
        );
        assert_eq!(
            Limit::chars(4)
                .keep(Keep::HeadAndTail)
                .apply(s)
                .with_marker("[…]"),
            "01[…]89"
        );
    }

    #[test]
    fn room_is_taken_only_when_the_text_is_cut() {
        assert_eq!(
            Limit::chars(5).room(2).apply("abcde").with_marker(".."),
            "abcde"
        );
        assert_eq!(
            Limit::chars(5).room(2).apply("abcdef").with_marker(".."),
            "abc.."
        );
        // More room than the limit keeps nothing but the marker.
        assert_eq!(Limit::chars(2).room(9).apply("abc").with_marker("…"), "…");
    }

    #[test]
    fn characters_are_counted_not_bytes() {
        let crab = "🦀".repeat(10);
        let t = Limit::chars(3).apply(&crab);
        assert_eq!((t.head, t.omitted), ("🦀🦀🦀", 7));
        let t = Limit::chars(4).keep(Keep::HeadAndTail).apply(&crab);
        assert_eq!((t.head, t.tail, t.omitted), ("🦀🦀", "🦀🦀", 6));
    }

    #[test]
    fn a_byte_limit_never_splits_a_character() {
        // Bytes: a 0, é 1..3, 🦀 3..7, z 7; a cut at 4, 5 or 6 falls inside the crab.
        let s = "aé🦀z";
        let t = Limit::bytes(4).apply(s);
        assert_eq!((t.head, t.omitted), ("aé", 5));
        let t = Limit::bytes(4).keep(Keep::Tail).apply(s);
        assert_eq!((t.head, t.tail, t.omitted), ("", "z", 7));
        let t = Limit::bytes(6).keep(Keep::HeadAndTail).apply(s);
        assert_eq!((t.head, t.tail, t.omitted), ("aé", "z", 4));
        // Two bytes each way: the head cut falls inside é, the tail cut inside the crab.
        let t = Limit::bytes(4).keep(Keep::HeadAndTail).apply(s);
        assert_eq!((t.head, t.tail, t.omitted), ("a", "z", 6));
    }

    #[test]
    fn every_cut_is_a_prefix_and_a_suffix_within_the_budget() {
        let texts = [
            "",
            "a",
            "ab",
            "héllo wörld",
            "🦀a🦀bc🦀",
            "e\u{301}e\u{301}x",
            "日本語のテキスト",
        ];
        for s in texts {
            for unit in [Unit::Chars, Unit::Bytes] {
                for keep in [Keep::Head, Keep::Tail, Keep::HeadAndTail] {
                    for max in 0..=units(s, unit) + 2 {
                        for room in 0..=2 {
                            let limit = Limit {
                                max,
                                unit,
                                keep,
                                room,
                            };
                            let t = limit.apply(s);
                            let case = format!("{s:?} {limit:?} -> {t:?}");
                            assert!(s.starts_with(t.head) && s.ends_with(t.tail), "{case}");
                            if units(s, unit) <= max {
                                assert_eq!((t.head, t.tail, t.omitted), (s, "", 0), "{case}");
                                continue;
                            }
                            let kept = units(t.head, unit) + units(t.tail, unit);
                            assert!(kept <= max.saturating_sub(room), "{case}");
                            assert_eq!(kept + t.omitted, units(s, unit), "{case}");
                            assert!(t.head.len() + t.tail.len() < s.len(), "{case}");
                            match keep {
                                Keep::Head => assert_eq!(t.tail, "", "{case}"),
                                Keep::Tail => assert_eq!(t.head, "", "{case}"),
                                Keep::HeadAndTail => {}
                            }
                            if unit == Unit::Chars {
                                assert_eq!(kept, max.saturating_sub(room), "{case}");
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn ellipsize_fits_in_max_characters() {
        assert_eq!(ellipsize("short", 5), "short");
        assert_eq!(ellipsize("longer", 5), "long…");
        assert_eq!(ellipsize("🦀🦀🦀🦀🦀🦀", 3), "🦀🦀…");
        assert_eq!(ellipsize("ab", 1), "…");
        assert_eq!(ellipsize("ab", 0), "");
        assert_eq!(ellipsize("", 0), "");
    }
}
