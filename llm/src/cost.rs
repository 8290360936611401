//! What a model request may cost: the conservative reservation a hard budget admits a request
//! with ([`reservation`]) before it is sent.
//!
//! Prices are [`Pricing`] (USD per million tokens); [`Pricing::cost`] prices a reported
//! [`Usage`](crate::Usage). A model without pricing has an unknown cost: never 0, and never admitted under a
//! hard budget.

use crate::config::Pricing;

/// How much an input estimate (characters / 4) is scaled up before it is priced: code and JSON
/// tokenize denser than prose, and a reservation must not be an underestimate.
pub const INPUT_ESTIMATE_MARGIN: f64 = 1.25;

/// The USD a request is admitted with: its estimated input (scaled by
/// [`INPUT_ESTIMATE_MARGIN`]) at the dearest input price (a cache write costs more than plain
/// input), plus the whole output limit at the output price. Reconciled with the reported usage
/// once the response is in.
pub fn reservation(pricing: &Pricing, input_tokens: u64, max_output: u32) -> Reservation {
    let input = (input_tokens as f64 * INPUT_ESTIMATE_MARGIN).ceil() as u64;
    let input_price = pricing.input.max(pricing.cache_write);
    let input_usd = per_million(input, input_price);
    Reservation {
        input_usd,
        usd: input_usd + per_million(u64::from(max_output), pricing.output),
    }
}

/// A request's reserved cost ([`reservation`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reservation {
    /// The whole reservation: input and the full output limit.
    pub usd: f64,
    /// Its input part: what a response cut off before its usage was reported is charged.
    pub input_usd: f64,
}

fn per_million(tokens: u64, price: f64) -> f64 {
    tokens as f64 * price / 1_000_000.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Usage;

    fn pricing() -> Pricing {
        Pricing {
            input: 3.0,
            output: 15.0,
            cache_read: 0.3,
            cache_write: 3.75,
        }
    }

    #[test]
    fn a_reservation_is_never_below_what_the_request_can_cost() {
        let r = reservation(&pricing(), 1_000, 2_000);
        // Any split of 1,000 input tokens, plus at most 2,000 output tokens.
        for usage in [
            Usage {
                input: 1_000,
                output: 2_000,
                ..Usage::default()
            },
            Usage {
                cache_write: 1_000,
                output: 2_000,
                ..Usage::default()
            },
            Usage {
                cache_read: 1_000,
                output: 2_000,
                ..Usage::default()
            },
        ] {
            assert!(pricing().cost(&usage) <= r.usd, "{usage:?}");
        }
        assert!((r.input_usd - 1_250.0 * 3.75 / 1e6).abs() < 1e-12);
        assert!((r.usd - r.input_usd - 2_000.0 * 15.0 / 1e6).abs() < 1e-12);
    }
}
