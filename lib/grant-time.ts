/** Grant time windows: a cron expression opens a window that stays open `duration` seconds, in the request's timezone. */
import { CronExpressionParser, type CronExpression } from "cron-parser";
import { badRequest } from "./errors";
import type { GrantTime } from "./grants";

// ---------------------------------------------------------------------------------------------------------
// Time windows
// ---------------------------------------------------------------------------------------------------------

interface CronState {
	expr: CronExpression | null;
	/** Most recent fire time found, and the fire after it: valid while from <= now < next. */
	from: number;
	next: number;
}

const CRON_CACHE_MAX = 10_000;
const cronCache = new Map<string, CronState>();
const validTz = new Map<string, boolean>();

function checkTz(tz: string): void {
	let ok = validTz.get(tz);
	if (ok === undefined) {
		try {
			new Intl.DateTimeFormat("en-US", { timeZone: tz });
			ok = true;
		} catch {
			ok = false;
		}
		if (validTz.size > 1000) validTz.clear();
		validTz.set(tz, ok);
	}
	if (!ok) throw badRequest(`tz: unknown timezone '${tz}'`);
}

/** The most recent fire time <= now (ms) of `cron` in `tz`, or null when it cannot be computed. */
function lastFire(cron: string, tz: string, now: number): number | null {
	const key = `${tz}\n${cron}`;
	let st = cronCache.get(key);
	if (!st) {
		let expr: CronExpression | null = null;
		const n = typeof cron === "string" ? cron.trim().split(/\s+/).length : 0;
		if (n === 5 || n === 6) {
			try {
				expr = CronExpressionParser.parse(cron.trim(), { tz });
			} catch {
				expr = null;
			}
		}
		st = { expr, from: NaN, next: NaN };
		if (cronCache.size >= CRON_CACHE_MAX) cronCache.clear();
		cronCache.set(key, st);
	}
	if (!st.expr) return null;
	if (st.from <= now && now < st.next) return st.from;
	try {
		// Fire times fall on whole seconds: prev() from now + 1 ms is the latest fire t <= now.
		st.expr.reset(new Date(now + 1));
		const from = st.expr.prev().getTime();
		let next: number;
		try {
			next = st.expr.next().getTime();
		} catch {
			next = now + 1; // unknown: recompute on the next call
		}
		st.from = from;
		st.next = next;
		return from;
	} catch {
		return null;
	}
}

/**
 * Whether any window of `time` is open at `now` in `tz` (default UTC): a window is open when the most recent
 * fire time t <= now of its `cron_exp` satisfies now < t + duration seconds. No windows (null or empty)
 * means no time restriction (open). An invalid cron or duration never opens; an unknown tz answers 400.
 */
export function timeWindowOpen(time: GrantTime[] | null | undefined, now: Date | number = Date.now(), tz = "UTC"): boolean {
	if (!time || time.length === 0) return true;
	const zone = tz || "UTC";
	checkTz(zone);
	const t = typeof now === "number" ? now : now.getTime();
	for (const w of time) {
		if (!w || typeof w.duration !== "number" || !(w.duration > 0)) continue;
		const from = lastFire(w.cron_exp, zone, t);
		if (from !== null && t < from + w.duration * 1000) return true;
	}
	return false;
}
