//! `calculator`: the smallest useful tool, and the reference for writing typed tools.

use schemars::JsonSchema;
use serde::Deserialize;

use crate::tool::{Cancellation, Effects, ToolContext, ToolError, TypedTool};

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[schemars(inline)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    Add,
    Sub,
    Mul,
    Div,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CalculatorArgs {
    /// The left operand.
    pub a: f64,
    /// The right operand.
    pub b: f64,
    /// The operation: add, sub, mul or div.
    pub op: Op,
}

pub struct Calculator;

#[async_trait::async_trait]
impl TypedTool for Calculator {
    type Args = CalculatorArgs;
    const NAME: &'static str = "calculator";
    const EFFECTS: Effects = Effects::READ_ONLY;
    const CANCELLATION: Cancellation = Cancellation::Immediate;

    fn description(&self) -> &str {
        "Exact arithmetic on two numbers: a op b, with op one of add, sub, mul, div. \
         Use it instead of computing in your head whenever a number in your answer depends on \
         arithmetic. Chain calls for longer expressions."
    }

    async fn run(&self, args: CalculatorArgs, _ctx: &ToolContext) -> Result<String, ToolError> {
        let value = match args.op {
            Op::Add => args.a + args.b,
            Op::Sub => args.a - args.b,
            Op::Mul => args.a * args.b,
            Op::Div if args.b == 0.0 => {
                return Err(ToolError::Failed(
                    "Division by zero. Use a non-zero b.".into(),
                ));
            }
            Op::Div => args.a / args.b,
        };
        Ok(value.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tool::Tool;
    use serde_json::json;

    #[test]
    fn schema_snapshot_shows_enum_values_and_descriptions() {
        insta::assert_json_snapshot!(Calculator.input_schema());
    }

    #[tokio::test]
    async fn missing_field_is_invalid_args_naming_it() {
        let err = Calculator
            .call(json!({"a": 1}), &ToolContext::new("."))
            .await
            .unwrap_err();
        match err {
            ToolError::InvalidArgs(m) => assert!(m.contains("missing field `b`"), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn division_by_zero() {
        let err = Calculator
            .call(json!({"a": 1, "b": 0, "op": "div"}), &ToolContext::new("."))
            .await
            .unwrap_err();
        assert_eq!(
            err,
            ToolError::Failed("Division by zero. Use a non-zero b.".into())
        );
        let ok = Calculator
            .call(
                json!({"a": 17.5, "b": 4, "op": "mul"}),
                &ToolContext::new("."),
            )
            .await
            .unwrap();
        assert_eq!(ok.text, "70");
    }
}
