/**
 * Linear-time regular expressions for `$regex` (queries, populate matches, grant row filters).
 *
 * JavaScript's engine backtracks: `(.*a){9}$` against 40 characters held the event loop for a minute. Every pattern a
 * caller or a grant supplies is compiled with re2js (a pure-JS port of RE2, linear in the input) and matched by it;
 * syntax RE2 cannot match in linear time (backreferences, lookaround) is refused with 400 at parse time.
 *
 * `SafeRegExp` is a real RegExp (lib/query.ts tests `instanceof RegExp`; the SQL translation reads source
 * and flags) whose `test`/`exec` delegate to the compiled RE2 program. Linear is not free: the NFA fallback costs about
 * (input length × program size), so each parsed query carries a work budget shared by all its patterns; a query that
 * would exceed it answers 400 instead of holding the process.
 */
import { RE2JS } from "re2js";
import { badRequest } from "./errors";

/** Upper bound of RE2's program size (≈ instructions): `[a-z]{300}` is about 300. */
export const MAX_PROGRAM = 1000;
/** Work units (characters matched × program size) one query may spend on its patterns: well under a second. */
export const REGEX_BUDGET = 50_000_000;

export class RegexBudget {
	spent = 0;
	constructor(readonly limit = REGEX_BUDGET) {}
	charge(units: number): void {
		this.spent += units;
		if (this.spent > this.limit) throw badRequest("query is too expensive: its $regex patterns would scan too much text; narrow the query");
	}
}

const FLAG_BITS: Record<string, number> = { i: RE2JS.CASE_INSENSITIVE, m: RE2JS.MULTILINE, s: RE2JS.DOTALL };

export class SafeRegExp extends RegExp {
	private readonly re2: RE2JS;
	private readonly cost: number;
	budget: RegexBudget;

	constructor(source: string, flags: string, budget: RegexBudget = new RegexBudget(), re2?: RE2JS) {
		super(source, flags);
		// RE2 reads the pattern as MongoDB's PCRE does (`\A`, `\z`, `\Q..\E`); the one JS spelling translated is `\uXXXX`.
		// (re2js' translateRegExp is not used: it turns the backreference `\k<n>` into a literal `k<n>`.)
		this.re2 =
			re2 ??
			RE2JS.compile(
				source.replace(/(?<!\\)((?:\\\\)*)\\u([0-9a-fA-F]{4})/g, "$1\\x{$2}"),
				[...flags].reduce((n, f) => n | (FLAG_BITS[f] ?? 0), 0),
			);
		this.cost = Math.max(1, this.re2.programSize());
		this.budget = budget;
	}

	get programSize(): number {
		return this.cost;
	}

	/** The same compiled pattern under another budget (grant filters are compiled once, used per request). */
	withBudget(budget: RegexBudget): SafeRegExp {
		return new SafeRegExp(this.source, this.flags, budget, this.re2);
	}

	override test(input: unknown): boolean {
		const s = String(input);
		this.budget.charge((s.length + 1) * this.cost);
		return this.re2.test(s);
	}

	override exec(input: string): RegExpExecArray | null {
		const s = String(input);
		this.budget.charge((s.length + 1) * this.cost);
		return this.re2.exec(s) as RegExpExecArray | null;
	}

	// Methods that build new RegExps from `this.constructor` (split, matchAll) must not take the subclass path.
	static get [Symbol.species](): RegExpConstructor {
		return RegExp;
	}
}

/**
 * Compiles a caller's pattern. `where` names it in messages (`query.title`). JS validity is checked first so a broken
 * pattern reads "not a valid regular expression"; a valid one RE2 refuses reads "cannot be matched in linear time".
 */
export function compileSafe(op: string, where: string, src: string, flags: string, budget: RegexBudget): SafeRegExp {
	try {
		new RegExp(src, flags);
	} catch {
		throw badRequest(`${op} is not a valid regular expression`);
	}
	let re: SafeRegExp;
	try {
		re = new SafeRegExp(src, flags, budget);
	} catch {
		throw badRequest(`${where}: ${op} uses syntax that cannot be matched in linear time`);
	}
	if (re.programSize > MAX_PROGRAM) throw badRequest(`${where}: ${op} is too complex`);
	return re;
}
