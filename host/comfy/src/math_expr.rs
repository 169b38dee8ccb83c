//! ComfyUI's `ComfyMathExpression`, folded when a workflow compiles: the Python expression
//! subset its templates use (`max(((a + 15) // 16) * 16, 256)`, `a & ~1`, `b if b > 0 else a`)
//! over literal inputs, with Python's int/float rules (`/` is float, `//` and `%` floor, `round`
//! to even, `int` truncates).

use std::collections::HashMap;

/// A Python number (booleans are the ints 0 and 1, as in Python).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Num {
    Int(i64),
    Float(f64),
}

impl Num {
    pub fn as_f64(self) -> f64 {
        match self {
            Num::Int(i) => i as f64,
            Num::Float(f) => f,
        }
    }
    fn truthy(self) -> bool {
        self.as_f64() != 0.0
    }
    fn int(self, what: &str) -> Result<i64, String> {
        match self {
            Num::Int(i) => Ok(i),
            Num::Float(_) => Err(format!("`{what}` takes integers")),
        }
    }
}

fn tokens(s: &str) -> Result<Vec<String>, String> {
    let (mut out, c): (Vec<String>, Vec<char>) = (Vec::new(), s.chars().collect());
    let mut i = 0;
    while i < c.len() {
        let ch = c[i];
        if ch.is_whitespace() {
            i += 1;
        } else if ch.is_ascii_digit() || (ch == '.' && c.get(i + 1).is_some_and(|d| d.is_ascii_digit())) {
            let start = i;
            while i < c.len() && (c[i].is_ascii_alphanumeric() || c[i] == '.') {
                i += 1;
            }
            out.push(c[start..i].iter().collect());
        } else if ch.is_alphabetic() || ch == '_' {
            let start = i;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            out.push(c[start..i].iter().collect());
        } else {
            let two: String = c[i..(i + 2).min(c.len())].iter().collect();
            if ["//", "**", "<=", ">=", "==", "!="].contains(&two.as_str()) {
                out.push(two);
                i += 2;
            } else if "+-*/%()<>,&|~^".contains(ch) {
                out.push(ch.to_string());
                i += 1;
            } else {
                return Err(format!("`{ch}` is not part of an expression this runtime evaluates"));
            }
        }
    }
    Ok(out)
}

struct Parser<'a> {
    t: Vec<String>,
    i: usize,
    vars: &'a HashMap<String, Num>,
}

fn arith(op: &str, a: Num, b: Num) -> Result<Num, String> {
    use Num::{Float, Int};
    Ok(match (op, a, b) {
        ("+", Int(x), Int(y)) => Int(x.checked_add(y).ok_or("integer overflow")?),
        ("-", Int(x), Int(y)) => Int(x.checked_sub(y).ok_or("integer overflow")?),
        ("*", Int(x), Int(y)) => Int(x.checked_mul(y).ok_or("integer overflow")?),
        ("+", x, y) => Float(x.as_f64() + y.as_f64()),
        ("-", x, y) => Float(x.as_f64() - y.as_f64()),
        ("*", x, y) => Float(x.as_f64() * y.as_f64()),
        (_, _, y) if ["/", "//", "%"].contains(&op) && y.as_f64() == 0.0 => return Err("division by zero".into()),
        ("/", x, y) => Float(x.as_f64() / y.as_f64()),
        ("//", Int(x), Int(y)) => Int(x.div_euclid(y) - i64::from(y < 0 && x.rem_euclid(y) != 0)),
        ("//", x, y) => Float((x.as_f64() / y.as_f64()).floor()),
        ("%", Int(x), Int(y)) => Int(((x % y) + y) % y),
        ("%", x, y) => {
            let (x, y) = (x.as_f64(), y.as_f64());
            Float(x - y * (x / y).floor())
        }
        ("**", Int(x), Int(y)) if y >= 0 => Int(x.checked_pow(y as u32).ok_or("integer overflow")?),
        ("**", x, y) => Float(x.as_f64().powf(y.as_f64())),
        ("&", x, y) => Int(x.int("&")? & y.int("&")?),
        ("|", x, y) => Int(x.int("|")? | y.int("|")?),
        ("^", x, y) => Int(x.int("^")? ^ y.int("^")?),
        _ => return Err(format!("`{op}` is not supported")),
    })
}

impl Parser<'_> {
    fn peek(&self) -> Option<&str> {
        self.t.get(self.i).map(String::as_str)
    }
    fn eat(&mut self, s: &str) -> bool {
        let hit = self.peek() == Some(s);
        self.i += usize::from(hit);
        hit
    }
    fn expect(&mut self, s: &str) -> Result<(), String> {
        if self.eat(s) {
            Ok(())
        } else {
            Err(format!("expected `{s}` at `{}`", self.peek().unwrap_or("the end")))
        }
    }
    fn ternary(&mut self) -> Result<Num, String> {
        let v = self.or()?;
        if self.eat("if") {
            let cond = self.or()?;
            self.expect("else")?;
            let other = self.ternary()?;
            return Ok(if cond.truthy() { v } else { other });
        }
        Ok(v)
    }
    fn or(&mut self) -> Result<Num, String> {
        let mut v = self.and()?;
        while self.eat("or") {
            let r = self.and()?;
            v = if v.truthy() { v } else { r };
        }
        Ok(v)
    }
    fn and(&mut self) -> Result<Num, String> {
        let mut v = self.not()?;
        while self.eat("and") {
            let r = self.not()?;
            v = if v.truthy() { r } else { v };
        }
        Ok(v)
    }
    fn not(&mut self) -> Result<Num, String> {
        if self.eat("not") {
            return Ok(Num::Int(i64::from(!self.not()?.truthy())));
        }
        self.compare()
    }
    fn compare(&mut self) -> Result<Num, String> {
        let a = self.bits()?;
        for op in ["<", ">", "<=", ">=", "==", "!="] {
            if self.eat(op) {
                let (x, y) = (a.as_f64(), self.bits()?.as_f64());
                let r = match op {
                    "<" => x < y,
                    ">" => x > y,
                    "<=" => x <= y,
                    ">=" => x >= y,
                    "==" => x == y,
                    _ => x != y,
                };
                return Ok(Num::Int(i64::from(r)));
            }
        }
        Ok(a)
    }
    fn bits(&mut self) -> Result<Num, String> {
        let mut v = self.sum()?;
        while let Some(op) = self.peek().filter(|p| ["&", "|", "^"].contains(p)).map(str::to_string) {
            self.i += 1;
            v = arith(&op, v, self.sum()?)?;
        }
        Ok(v)
    }
    fn sum(&mut self) -> Result<Num, String> {
        let mut v = self.term()?;
        while let Some(op) = self.peek().filter(|p| ["+", "-"].contains(p)).map(str::to_string) {
            self.i += 1;
            v = arith(&op, v, self.term()?)?;
        }
        Ok(v)
    }
    fn term(&mut self) -> Result<Num, String> {
        let mut v = self.unary()?;
        while let Some(op) = self.peek().filter(|p| ["*", "/", "//", "%"].contains(p)).map(str::to_string) {
            self.i += 1;
            v = arith(&op, v, self.unary()?)?;
        }
        Ok(v)
    }
    fn unary(&mut self) -> Result<Num, String> {
        if self.eat("-") {
            return arith("-", Num::Int(0), self.unary()?);
        }
        if self.eat("+") {
            return self.unary();
        }
        if self.eat("~") {
            return Ok(Num::Int(!self.unary()?.int("~")?));
        }
        let base = self.atom()?;
        if self.eat("**") {
            return arith("**", base, self.unary()?);
        }
        Ok(base)
    }
    fn atom(&mut self) -> Result<Num, String> {
        let Some(t) = self.peek().map(str::to_string) else { return Err("the expression ends early".into()) };
        self.i += 1;
        if t == "(" {
            let v = self.ternary()?;
            self.expect(")")?;
            return Ok(v);
        }
        if t.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
            return match t.parse::<i64>() {
                Ok(i) => Ok(Num::Int(i)),
                Err(_) => t.parse::<f64>().map(Num::Float).map_err(|_| format!("`{t}` is not a number")),
            };
        }
        if self.eat("(") {
            let mut args = Vec::new();
            if !self.eat(")") {
                loop {
                    args.push(self.ternary()?);
                    if self.eat(")") {
                        break;
                    }
                    self.expect(",")?;
                }
            }
            return call(&t, &args);
        }
        match t.as_str() {
            "True" => Ok(Num::Int(1)),
            "False" => Ok(Num::Int(0)),
            _ => self.vars.get(&t).copied().ok_or_else(|| format!("`{t}` is not an input of the node")),
        }
    }
}

fn call(f: &str, args: &[Num]) -> Result<Num, String> {
    let one = || match args {
        [x] => Ok(x.as_f64()),
        _ => Err(format!("`{f}` takes one argument")),
    };
    let int = |x: f64| if x.is_finite() { Ok(Num::Int(x as i64)) } else { Err(format!("`{f}` of {x}")) };
    match f {
        "floor" => int(one()?.floor()),
        "ceil" => int(one()?.ceil()),
        "round" => int(one()?.round_ties_even()),
        "int" => int(one()?.trunc()),
        "float" => Ok(Num::Float(one()?)),
        "abs" => Ok(match args {
            [Num::Int(i)] => Num::Int(i.abs()),
            _ => Num::Float(one()?.abs()),
        }),
        "sqrt" => Ok(Num::Float(one()?.sqrt())),
        "log2" => Ok(Num::Float(one()?.log2())),
        "min" | "max" if !args.is_empty() => {
            let pick = |a: &Num, b: &Num| if (f == "min") == (b.as_f64() < a.as_f64()) { *b } else { *a };
            Ok(args[1..].iter().fold(args[0], |a, b| pick(&a, b)))
        }
        _ => Err(format!("`{f}` is not a function this runtime evaluates")),
    }
}

/// Evaluates `expr` with the node's inputs `vars` (`a`, `b`, …).
pub fn eval(expr: &str, vars: &HashMap<String, Num>) -> Result<Num, String> {
    let mut p = Parser { t: tokens(expr)?, i: 0, vars };
    let v = p.ternary()?;
    match p.peek() {
        None => Ok(v),
        Some(t) => Err(format!("unexpected `{t}`")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(e: &str, a: Num, b: Num) -> Num {
        let vars = HashMap::from([("a".to_string(), a), ("b".to_string(), b), ("c".to_string(), Num::Int(2))]);
        eval(e, &vars).unwrap_or_else(|m| panic!("{e}: {m}"))
    }

    #[test]
    fn the_corpus_expressions_evaluate_as_python_does() {
        use Num::{Float, Int};
        // Each against what Python 3 gives for the same inputs.
        assert_eq!(ev("max(((a + 15) // 16) * 16, 256)", Int(300), Int(0)), Int(304));
        assert_eq!(ev("(a // 32) * 32", Int(-33), Int(0)), Int(-64));
        assert_eq!(ev("a & ~1", Int(7), Int(0)), Int(6));
        assert_eq!(ev("a & -8", Int(21), Int(0)), Int(16));
        assert_eq!(ev("a/2", Int(5), Int(0)), Float(2.5));
        assert_eq!(ev("floor(a * b) + 1", Float(5.0), Int(16)), Int(81));
        assert_eq!(ev("round (a * 24)", Float(2.5), Int(0)), Int(60));
        assert_eq!(ev("round(a)", Float(2.5), Int(0)), Int(2), "ties to even");
        assert_eq!(ev("max(5, round(a * 24)) + (5 - (max(5, round(a * 24)) % 17)) % 17", Float(3.0), Int(0)), Int(73));
        assert_eq!(ev("a % b if b > 0 else 0", Int(-7), Int(3)), Int(2));
        assert_eq!(ev("b if b > 0 else a", Int(4), Int(0)), Int(4));
        assert_eq!(ev("(a % 4 == 1) and ((b - 1) % 4 == 0)", Int(81), Int(5)), Int(1));
        assert_eq!(ev("ceil(1.5 * log2(max(a, b))) + 2", Int(1024), Int(512)), Int(17));
        assert_eq!(ev("4 * ceil((a - b * c + c - 1) / 4) + 1", Int(81), Int(5)), Int(73));
        assert_eq!(ev("min(abs(b), 16) * a", Int(3), Int(-20)), Int(48));
        assert_eq!(ev("2 ** 3 ** 2", Int(0), Int(0)), Int(512), "right-associative");
        assert_eq!(ev("-7 // 2", Int(0), Int(0)), Int(-4));
    }

    #[test]
    fn what_it_cannot_evaluate_is_named() {
        let vars = HashMap::new();
        for (e, want) in
            [("a + 1", "`a`"), ("pow(2, 3)", "`pow`"), ("1 / 0", "division"), ("1 +", "ends"), ("1 $ 2", "`$`")]
        {
            let err = eval(e, &vars).unwrap_err();
            assert!(err.contains(want), "{e}: {err}");
        }
    }
}
