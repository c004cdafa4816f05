/**
 * Grant time windows: a cron expression opens a window that stays open `duration` seconds, on the wall clock of the
 * request's timezone.
 *
 * Cost is bounded by construction (docs/security.md, "Grant time windows"):
 * - a grant holds at most MAX_TIME_WINDOWS windows (validation answers 400 beyond; a stored grant with more, written
 *   before the limit, never opens);
 * - an expression is parsed once (cron-parser, for its syntax) into per-field tables, independent of the timezone;
 *   deciding whether a window is open never iterates cron-parser's schedule. It walks back over calendar days from
 *   now, skipping in one step every month in which the expression cannot fire (a table of 12 months × 4 month
 *   lengths × 7 weekdays of the 1st, built with the expression), and stops at the first day that fires or once the
 *   days are older than the window's duration. Any expression, however sparse (29 February at 23:59), costs at most
 *   4 800 month steps (the 400-year Gregorian cycle) plus two months of days, and usually a handful;
 * - the tables live with the compiled grant (the grant index, rebuilt when grants change), so no request can evict
 *   them: a new timezone costs one offset lookup, not a new schedule. A bounded cache by expression text spares the
 *   parse when the index is rebuilt.
 */
import { CronExpressionParser } from "cron-parser";
import { badRequest } from "./errors";
import type { GrantTime } from "./grants";

/** Most windows one grant may hold. */
export const MAX_TIME_WINDOWS = 16;

const DAY_MS = 86_400_000;
const LAST_SECOND = 86_399;
/** Month steps of a 400-year cycle (the Gregorian calendar repeats), plus two months of day steps. */
const MAX_STEPS = 400 * 12 + 62;

// ---------------------------------------------------------------------------------------------------------
// Calendar and timezones
// ---------------------------------------------------------------------------------------------------------

const DAYS_IN_MONTH = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
const isLeap = (y: number) => (y % 4 === 0 && y % 100 !== 0) || y % 400 === 0;
const daysIn = (y: number, m: number) => (m === 2 && isLeap(y) ? 29 : DAYS_IN_MONTH[m - 1]);
/** Weekday (0 = Sunday) of a day counted from 1970-01-01 (a Thursday). */
const weekdayOf = (day: number) => (((day + 4) % 7) + 7) % 7;

const ZONES_MAX = 1024;
const zones = new Map<string, Intl.DateTimeFormat>();

/** The formatter of `tz`, or null when it is not a timezone (timezones cached, bounded; names that are none are not kept). */
function zone(tz: string): Intl.DateTimeFormat | null {
	let f = zones.get(tz);
	if (f === undefined) {
		try {
			f = new Intl.DateTimeFormat("en-US", {
				timeZone: tz,
				hourCycle: "h23",
				year: "numeric",
				month: "numeric",
				day: "numeric",
				hour: "numeric",
				minute: "numeric",
				second: "numeric",
			});
		} catch {
			return null;
		}
		if (zones.size >= ZONES_MAX) zones.clear();
		zones.set(tz, f);
	}
	return f;
}

/** Wall clock minus UTC at `instant` (ms), in the zone of `fmt`. */
function offsetAt(fmt: Intl.DateTimeFormat, instant: number): number {
	const p: Record<string, number> = {};
	for (const part of fmt.formatToParts(instant)) if (part.type !== "literal") p[part.type] = Number(part.value);
	const wall = Date.UTC(p.year, p.month - 1, p.day, p.hour, p.minute, p.second);
	return wall - (instant - (((instant % 1000) + 1000) % 1000));
}

/** The instant of a wall-clock time (ms), from the offset `guess` (a wall time the clock skips lands next to the jump). */
function instantOf(fmt: Intl.DateTimeFormat | "UTC", wall: number, guess: number): number {
	if (fmt === "UTC") return wall;
	const off = offsetAt(fmt, wall - guess);
	return off === guess ? wall - guess : wall - offsetAt(fmt, wall - off);
}

// ---------------------------------------------------------------------------------------------------------
// Compiled expressions
// ---------------------------------------------------------------------------------------------------------

/** A cron expression as per-field tables. Day rules follow cron-parser's (dom OR dow when both are restricted). */
export interface CompiledCron {
	/** Seconds, minutes, hours that fire, descending. */
	seconds: number[];
	minutes: number[];
	hours: number[];
	/** monthFires[(month - 1) * 28 + (daysInMonth - 28) * 7 + weekdayOfThe1st]: some day of such a month fires. */
	monthFires: Uint8Array;
	/** Whether it fires at all (some month shape of the 400-year cycle has a firing day). */
	fires: boolean;
	dayFires(day: number, daysInMonth: number, weekday: number): boolean;
}

function numbers(values: readonly (number | string)[], max: number): boolean[] {
	const out = new Array<boolean>(max + 1).fill(false);
	for (const v of values) if (typeof v === "number" && v >= 0 && v <= max) out[v] = true;
	return out;
}

const descending = (values: readonly (number | string)[]) => [...new Set(values.filter((v): v is number => typeof v === "number"))].sort((a, b) => b - a);

/** Parses `expr` (5 or 6 fields); throws with cron-parser's message when it is not a cron expression. */
export function parseCron(expr: string): CompiledCron {
	const text = expr.trim();
	const n = text.split(/\s+/).length;
	if (n !== 5 && n !== 6) throw new Error(`a cron expression has 5 or 6 fields, got ${n}`);
	// A fixed start date (the schedule is never iterated) and a seed for `H` values: the same text, the same fields.
	const { fields } = CronExpressionParser.parse(text, { currentDate: 0, tz: "UTC", hashSeed: text });
	const dom = numbers(fields.dayOfMonth.values, 31);
	const domLast = fields.dayOfMonth.hasLastChar;
	const dow = numbers(fields.dayOfWeek.values, 7);
	if (dow[7]) dow[0] = true;
	const dowLast = new Array<boolean>(7).fill(false);
	for (const v of fields.dayOfWeek.values) if (typeof v === "string" && v.endsWith("L")) dowLast[parseInt(v, 10) % 7] = true;
	const nth = fields.dayOfWeek.nthDay ?? 0;
	const domRestricted = !fields.dayOfMonth.isWildcard;
	const dowRestricted = !fields.dayOfWeek.isWildcard;
	const dayFires = (d: number, dim: number, wd: number): boolean => {
		const byDom = dom[d] || (domLast && d === dim);
		const byDow = (dow[wd] && (nth <= 0 || Math.ceil(d / 7) === nth)) || (dowLast[wd] && d + 7 > dim);
		if (domRestricted && dowRestricted) return byDom || byDow;
		if (domRestricted) return byDom;
		if (dowRestricted) return byDow;
		return true;
	};
	const months = numbers(fields.month.values, 12);
	const monthFires = new Uint8Array(12 * 28);
	let fires = false;
	for (let m = 1; m <= 12; m++) {
		if (!months[m]) continue;
		for (const dim of m === 2 ? [28, 29] : [DAYS_IN_MONTH[m - 1]])
			for (let fw = 0; fw < 7; fw++)
				for (let d = 1; d <= dim; d++)
					if (dayFires(d, dim, (fw + d - 1) % 7)) {
						monthFires[(m - 1) * 28 + (dim - 28) * 7 + fw] = 1;
						fires = true;
						break;
					}
	}
	return { seconds: descending(fields.second.values), minutes: descending(fields.minute.values), hours: descending(fields.hour.values), monthFires, fires, dayFires };
}

const PARSED_MAX = 4096;
const parsed = new Map<string, CompiledCron | null>();

/** The compiled form of `expr`, or null when it is invalid or never fires. Cached by text (bounded, LRU). */
export function compileCron(expr: unknown): CompiledCron | null {
	if (typeof expr !== "string") return null;
	let c = parsed.get(expr);
	if (c !== undefined) {
		parsed.delete(expr);
		parsed.set(expr, c);
		return c;
	}
	try {
		c = parseCron(expr);
		if (!c.fires) c = null;
	} catch {
		c = null;
	}
	if (parsed.size >= PARSED_MAX) parsed.delete(parsed.keys().next().value as string);
	parsed.set(expr, c);
	return c;
}

/** A grant's windows, compiled; null entries never open. `tooMany`: more than MAX_TIME_WINDOWS, never opens. */
export interface CompiledWindows {
	windows: Array<{ cron: CompiledCron | null; durationMs: number }>;
	tooMany: boolean;
}

export function compileWindows(time: GrantTime[]): CompiledWindows {
	if (time.length > MAX_TIME_WINDOWS) return { windows: [], tooMany: true };
	return {
		tooMany: false,
		windows: time.map((w) => {
			const ok = !!w && typeof w.duration === "number" && w.duration > 0;
			return { cron: ok ? compileCron(w.cron_exp) : null, durationMs: ok ? w.duration * 1000 : 0 };
		}),
	};
}

// ---------------------------------------------------------------------------------------------------------
// Evaluation
// ---------------------------------------------------------------------------------------------------------

/** The latest time of day (seconds) at or before `limit` at which `c` fires, or -1. */
function latestTime(c: CompiledCron, limit: number): number {
	if (limit < 0) return -1;
	const lh = Math.floor(limit / 3600);
	const lm = Math.floor((limit % 3600) / 60);
	const ls = limit % 60;
	for (const h of c.hours) {
		if (h > lh) continue;
		for (const m of c.minutes) {
			if (h === lh && m > lm) continue;
			const cap = h === lh && m === lm ? ls : 59;
			for (const s of c.seconds) if (s <= cap) return h * 3600 + m * 60 + s;
		}
	}
	return -1;
}

/**
 * Whether the window (`c`, `durationMs`) is open at `now`: its latest fire time t <= now (on the wall clock of the
 * zone) satisfies now < t + duration. Walks back over days, stopping at the first firing day or past the duration.
 */
function windowOpen(c: CompiledCron, durationMs: number, now: number, fmt: Intl.DateTimeFormat | "UTC"): boolean {
	const off = fmt === "UTC" ? 0 : offsetAt(fmt, now);
	const wall = now + off;
	const lower = now - durationMs;
	// A day of the walk is local; offsets differ by less than a day over the walk, hence the one-day margin.
	const stopDay = Math.floor((lower + off) / DAY_MS) - 1;
	let day = Math.floor(wall / DAY_MS);
	const start = new Date(day * DAY_MS);
	let y = start.getUTCFullYear();
	let m = start.getUTCMonth() + 1;
	let d = start.getUTCDate();
	let limit = Math.floor((wall - day * DAY_MS) / 1000);
	const previousMonth = () => {
		m -= 1;
		if (m === 0) {
			m = 12;
			y -= 1;
		}
		d = daysIn(y, m);
	};
	for (let steps = 0; steps < MAX_STEPS && day >= stopDay; steps++) {
		const dim = daysIn(y, m);
		if (!c.monthFires[(m - 1) * 28 + (dim - 28) * 7 + weekdayOf(day - d + 1)]) {
			day -= d;
			previousMonth();
			limit = LAST_SECOND;
			continue;
		}
		if (c.dayFires(d, dim, weekdayOf(day))) {
			for (let t = latestTime(c, limit); t >= 0;) {
				const fire = instantOf(fmt, day * DAY_MS + t * 1000, off);
				if (fire <= now) return fire > lower;
				// Still ahead (around a change of offset): look as far back as it is ahead, in one step.
				t = latestTime(c, t - Math.ceil((fire - now) / 1000));
			}
		}
		day -= 1;
		limit = LAST_SECOND;
		if (--d === 0) previousMonth();
	}
	return false;
}

/** Longest timezone name looked up (IANA names are under 40 characters): the cache never holds long strings. */
const TZ_MAX_LENGTH = 64;

function checkTz(tz: string): Intl.DateTimeFormat | "UTC" {
	if (tz === "UTC") return "UTC";
	const fmt = tz.length <= TZ_MAX_LENGTH ? zone(tz) : null;
	if (!fmt) throw badRequest(`tz: unknown timezone '${tz.slice(0, TZ_MAX_LENGTH)}'`);
	return fmt;
}

/**
 * Whether any window is open at `now` in `tz` (default UTC). No windows (null or empty) means no time restriction
 * (open). An invalid cron or duration never opens, nor do more than MAX_TIME_WINDOWS windows; an unknown tz answers 400.
 */
export function windowsOpen(compiled: CompiledWindows, now: number, tz = "UTC"): boolean {
	const fmt = checkTz(tz || "UTC");
	if (compiled.tooMany) return false;
	for (const w of compiled.windows) if (w.cron && windowOpen(w.cron, w.durationMs, now, fmt)) return true;
	return false;
}

/** windowsOpen over stored windows (compiled through the cache by text). */
export function timeWindowOpen(time: GrantTime[] | null | undefined, now: Date | number = Date.now(), tz = "UTC"): boolean {
	if (!time || time.length === 0) return true;
	return windowsOpen(compileWindows(time), typeof now === "number" ? now : now.getTime(), tz);
}
