//! Word wrapping of streamed text at the terminal's width.
//!
//! The answer arrives in deltas that end anywhere — mid-word, mid-line, between a space and the
//! next word — so the [`Wrapper`] keeps its state between them: the column the cursor is at,
//! the word in progress (held back until it is complete, since only then is it known whether
//! it fits), and the spaces before it (written only when a word follows on the same line: a
//! line broken at a space does not end in spaces). Text is measured in terminal columns: a wide
//! (CJK, emoji) character takes two, a combining mark none. A word wider than a whole line is
//! broken at the width, starting on a line of its own. Newlines in the text are kept; so are
//! the spaces that start a line (indentation), when they fit with the word after them.
//!
//! A stream that pauses mid-word would leave that word unseen: [`Wrapper::release`] writes it
//! out as far as it has come, and the rest of the word follows it when it comes (broken at the
//! width only if it must: what is on screen cannot move).

use unicode_width::UnicodeWidthChar;

/// The columns a tab advances to: the next multiple of eight.
const TAB: usize = 8;

/// Wraps streamed text at word boundaries; see the module's documentation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wrapper {
    /// The line's width in columns; `None`: no wrapping (text passes through as it is).
    width: Option<usize>,
    /// The cursor's column once everything returned so far is written.
    col: usize,
    /// The word in progress, not written yet.
    word: String,
    /// Its width in columns.
    word_width: usize,
    /// Spaces and tabs after the last word written, not written yet.
    spaces: String,
    /// The word in progress was released ([`Wrapper::release`]): its rest follows it as it
    /// comes.
    continuing: bool,
}

impl Wrapper {
    /// A wrapper for lines of `width` columns (`None`: no wrapping; `Some(0)` counts as 1).
    pub fn new(width: Option<usize>) -> Self {
        Self {
            width: width.map(|w| w.max(1)),
            col: 0,
            word: String::new(),
            word_width: 0,
            spaces: String::new(),
            continuing: false,
        }
    }

    /// The terminal was resized: lines from here on are `width` wide.
    pub fn set_width(&mut self, width: Option<usize>) {
        self.width = width.map(|w| w.max(1));
    }

    /// Whether the cursor is at the start of a line with nothing held back.
    pub fn at_line_start(&self) -> bool {
        self.col == 0 && self.word.is_empty()
    }

    /// Someone else wrote a newline (after [`Wrapper::finish`]): the cursor is at column 0.
    pub fn newline(&mut self) {
        self.col = 0;
        self.spaces.clear();
        self.continuing = false;
    }

    /// Whether a word is held back.
    pub fn holding(&self) -> bool {
        !self.word.is_empty()
    }

    /// Writes out the word held back though it may not be complete (the stream paused
    /// mid-word): where it fits now, after its spaces or at the next line's start. The rest of
    /// the word follows it as it comes.
    pub fn release(&mut self) -> String {
        let mut out = String::new();
        if let Some(width) = self.width
            && !self.word.is_empty()
        {
            self.place_word(width, &mut out);
            self.continuing = true;
        }
        out
    }

    /// What to write for the next piece of the stream. The word the piece ends in (if it
    /// ends mid-word) is held back until the word is complete or [`Wrapper::finish`].
    pub fn push(&mut self, text: &str) -> String {
        let Some(width) = self.width else {
            if let Some(last) = text.rfind('\n') {
                self.col = usize::from(last + 1 < text.len());
            } else if !text.is_empty() {
                self.col += 1;
            }
            return text.to_string();
        };
        let mut out = String::with_capacity(text.len() + 8);
        for c in text.chars() {
            if matches!(c, '\n' | ' ' | '\t') {
                self.continuing = false;
            }
            match c {
                '\n' => {
                    self.place_word(width, &mut out);
                    // Spaces at the end of a line show nothing.
                    self.spaces.clear();
                    out.push('\n');
                    self.col = 0;
                }
                ' ' | '\t' => {
                    self.place_word(width, &mut out);
                    self.spaces.push(c);
                }
                // The rest of a released word: right after it, on the next line if it must.
                c if self.continuing => {
                    let w = c.width().unwrap_or(0);
                    if self.col + w > width && self.col > 0 {
                        out.push('\n');
                        self.col = 0;
                    }
                    out.push(c);
                    self.col += w;
                }
                c => {
                    self.word.push(c);
                    self.word_width += c.width().unwrap_or(0);
                    if self.word_width > width {
                        self.break_word(width, &mut out);
                    }
                }
            }
        }
        out
    }

    /// Writes out what is held back — the word in progress — as it is: the stream ended, or
    /// something else is about to be written. Trailing spaces are dropped.
    pub fn finish(&mut self) -> String {
        let mut out = String::new();
        if let Some(width) = self.width {
            self.place_word(width, &mut out);
        }
        self.spaces.clear();
        self.continuing = false;
        out
    }

    /// The columns `self.spaces` take when written at column `col`.
    fn spaces_width(&self, mut col: usize) -> usize {
        let start = col;
        for c in self.spaces.chars() {
            col = if c == '\t' {
                (col / TAB + 1) * TAB
            } else {
                col + 1
            };
        }
        col - start
    }

    /// Writes the complete word held back (at most `width` wide: a wider one was broken as it
    /// grew): after its spaces when both fit on this line, else at the start of the next.
    fn place_word(&mut self, width: usize, out: &mut String) {
        if self.word.is_empty() {
            return;
        }
        let spaces = self.spaces_width(self.col);
        if self.col + spaces + self.word_width <= width {
            out.push_str(&self.spaces);
            self.col += spaces;
        } else if self.col > 0 {
            out.push('\n');
            self.col = 0;
        }
        // At a line's start with indentation too wide for the word: the word alone.
        self.spaces.clear();
        out.push_str(&self.word);
        self.col += self.word_width;
        self.word.clear();
        self.word_width = 0;
    }

    /// The word in progress is wider than a line: it starts on a line of its own, and each
    /// full line of it is written as soon as it is known; the rest stays held back.
    fn break_word(&mut self, width: usize, out: &mut String) {
        if self.col > 0 {
            out.push('\n');
            self.col = 0;
        }
        self.spaces.clear();
        while self.word_width > width {
            let mut taken = 0;
            let mut end = 0;
            for (i, c) in self.word.char_indices() {
                let w = c.width().unwrap_or(0);
                // At least one character per line, even one wider than the line.
                if taken + w > width && end > 0 {
                    break;
                }
                taken += w;
                end = i + c.len_utf8();
            }
            out.push_str(&self.word[..end]);
            out.push('\n');
            self.word.drain(..end);
            self.word_width -= taken;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use unicode_width::UnicodeWidthStr;

    /// `text` wrapped at `width`, fed in one piece.
    fn wrap(text: &str, width: usize) -> String {
        let mut w = Wrapper::new(Some(width));
        let mut out = w.push(text);
        out.push_str(&w.finish());
        out
    }

    /// `text` wrapped at `width`, fed in pieces of `chunk` characters.
    fn wrap_chunked(text: &str, width: usize, chunk: usize) -> String {
        let chars: Vec<char> = text.chars().collect();
        let mut w = Wrapper::new(Some(width));
        let mut out = String::new();
        for piece in chars.chunks(chunk) {
            out.push_str(&w.push(&piece.iter().collect::<String>()));
        }
        out.push_str(&w.finish());
        out
    }

    fn widest_line(text: &str) -> usize {
        text.lines().map(UnicodeWidthStr::width).max().unwrap_or(0)
    }

    #[test]
    fn lines_break_at_spaces_and_never_end_in_one() {
        assert_eq!(
            wrap("the quick brown fox jumps over the lazy dog", 15),
            "the quick brown\nfox jumps over\nthe lazy dog"
        );
        // Exactly the width fits; one more column does not.
        assert_eq!(wrap("aaaa bbbb", 9), "aaaa bbbb");
        assert_eq!(wrap("aaaa bbbbb", 9), "aaaa\nbbbbb");
        // Several spaces between words stay when the next word fits after them.
        assert_eq!(wrap("a  b", 10), "a  b");
        assert_eq!(wrap("short line", 80), "short line");
    }

    #[test]
    fn a_word_wider_than_the_line_is_broken_at_the_width_on_lines_of_its_own() {
        assert_eq!(
            wrap("see https://example.com/a/very/long/path ok", 12),
            "see\nhttps://exam\nple.com/a/ve\nry/long/path\nok"
        );
        assert_eq!(wrap("abcdefghij", 3), "abc\ndef\nghi\nj");
        assert_eq!(wrap("abcdef", 1), "a\nb\nc\nd\ne\nf");
    }

    #[test]
    fn newlines_in_the_text_are_kept_and_reset_the_column() {
        assert_eq!(
            wrap("first line\nsecond line is longer\n\nafter a blank", 12),
            "first line\nsecond line\nis longer\n\nafter a\nblank"
        );
        // Spaces before a newline show nothing and are dropped.
        assert_eq!(wrap("a   \nb", 10), "a\nb");
    }

    #[test]
    fn indentation_at_a_line_start_is_kept_when_it_fits() {
        assert_eq!(
            wrap("list:\n  - one item\n    code here", 20),
            "list:\n  - one item\n    code here"
        );
        // A tab advances to the next multiple of eight.
        assert_eq!(wrap("\tx", 10), "\tx");
        assert_eq!(wrap("abc\tdefgh", 10), "abc\ndefgh");
        // Indentation wider than the line with its word: the word alone.
        assert_eq!(wrap("\n        word", 6), "\nword");
    }

    #[test]
    fn wide_and_zero_width_characters_take_their_columns() {
        // Each of these takes two columns: three fit in 6, not in 5.
        assert_eq!(wrap("日本語 日本語", 6), "日本語\n日本語");
        assert_eq!(wrap("日本語 日本語", 13), "日本語 日本語");
        // A run without spaces (CJK) is broken at the width, never past it.
        let cjk = "日本語の文章は空白で区切られない";
        let wrapped = wrap(cjk, 7);
        assert!(wrapped.lines().all(|l| l.width() <= 7), "{wrapped}");
        assert_eq!(wrapped.replace('\n', ""), cjk);
        // A combining accent takes no column: "e\u{301}" is one column wide.
        assert_eq!(wrap("cafe\u{301} bar", 8), "cafe\u{301} bar");
        // Emoji are wide.
        assert_eq!(wrap("ok 👍👍", 5), "ok\n👍👍");
        // A character wider than the whole line still shows, alone on its line (a degenerate
        // terminal: the line after it starts anew).
        assert_eq!(wrap("日日", 1), "日\n日\n");
    }

    #[test]
    fn streamed_in_any_pieces_the_result_is_the_same() {
        let text = "Anvil streams the answer as it arrives; long lines wrap at word \
                    boundaries.\n\n  Indented: 日本語のテキスト and a https://very.long/url/that/does/not/fit \
                    \tthen tabs, and the end.";
        for width in [1, 7, 12, 20, 33, 80] {
            let whole = wrap(text, width);
            for chunk in [1, 2, 3, 5, 8, 13] {
                assert_eq!(
                    wrap_chunked(text, width, chunk),
                    whole,
                    "width {width}, chunks of {chunk}"
                );
            }
            if width >= 40 {
                // Wide enough that no word is broken: every word comes out whole.
                let got: Vec<&str> = whole.split_whitespace().collect();
                assert_eq!(
                    got,
                    text.split_whitespace().collect::<Vec<_>>(),
                    "width {width}"
                );
            }
            if width >= 2 {
                assert!(widest_line(&whole) <= width, "width {width}:\n{whole}");
            }
        }
    }

    #[test]
    fn a_word_split_across_deltas_is_held_back_until_it_is_complete() {
        let mut w = Wrapper::new(Some(10));
        assert_eq!(w.push("hello wo"), "hello");
        assert!(!w.at_line_start());
        // The word turns out too long for the rest of the line: it goes to the next.
        assert_eq!(w.push("rld "), "\nworld");
        assert_eq!(w.push("ok"), "");
        assert_eq!(w.finish(), " ok");
        w.newline();
        assert!(w.at_line_start());
        assert_eq!(w.push("next\n"), "next\n");
        assert!(w.at_line_start());
    }

    #[test]
    fn a_word_the_stream_paused_in_is_released_and_its_rest_follows_it() {
        let mut w = Wrapper::new(Some(12));
        assert_eq!(w.push("hello wo"), "hello");
        assert!(w.holding());
        assert_eq!(w.release(), " wo");
        assert!(!w.holding());
        // The rest follows on the same line; only past the width is the word broken.
        assert_eq!(w.push("rl"), "rl");
        assert_eq!(w.push("dwide more"), "dw\nide");
        assert_eq!(w.finish(), " more");
        // A released word that does not fit where it is goes to the next line whole.
        let mut w = Wrapper::new(Some(10));
        assert_eq!(w.push("abcdefgh xyz"), "abcdefgh");
        assert_eq!(w.release(), "\nxyz");
        assert_eq!(w.push("zy next"), "zy");
        assert_eq!(w.finish(), " next");
        // Nothing held back: nothing to release.
        assert_eq!(w.release(), "");
    }

    #[test]
    fn a_resize_applies_to_the_words_after_it() {
        let mut w = Wrapper::new(Some(40));
        let mut out = w.push("one two three ");
        w.set_width(Some(10));
        out.push_str(&w.push("four five six"));
        out.push_str(&w.finish());
        assert_eq!(out, "one two three\nfour five\nsix");
    }

    #[test]
    fn without_a_width_text_passes_through_and_the_column_is_tracked() {
        let mut w = Wrapper::new(None);
        let long = "word ".repeat(100);
        assert_eq!(w.push(&long), long);
        assert!(!w.at_line_start());
        assert_eq!(w.push("end\n"), "end\n");
        assert!(w.at_line_start());
        assert_eq!(w.finish(), "");
    }
}
