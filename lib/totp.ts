/** RFC 6238 TOTP (HMAC-SHA1, 6 digits) over a hex-encoded secret. */
import { createHmac, timingSafeEqual } from "crypto";

/** Bounds callers validate `period` and `window` against before storing or checking. */
export const TOTP_LIMITS = { maxPeriod: 3600, maxWindow: 5 } as const;

/**
 * POST /auth/check: after this many `NOK` answers for one session within TOTP_FAIL_WINDOW_MS, 429 until it passes; the
 * same for one user (uid, else aid, else cid) across all its sessions, and for one IP across all users.
 */
export const TOTP_FAIL_LIMIT = 30;
export const TOTP_USER_FAIL_LIMIT = 60;
export const TOTP_IP_FAIL_LIMIT = 120;
export const TOTP_FAIL_WINDOW_MS = 15 * 60 * 1000;

const DIGITS = 6;
const HEX = /^(?:[0-9a-fA-F]{2})+$/;
const CODE = /^\d{6}$/;

const validPeriod = (p: number) => Number.isInteger(p) && p >= 1 && p <= TOTP_LIMITS.maxPeriod;
const validWindow = (w: number) => Number.isInteger(w) && w >= 0 && w <= TOTP_LIMITS.maxWindow;

/** RFC 4226 HOTP for one counter value. */
function hotp(key: Buffer, counter: number): string {
	const msg = Buffer.alloc(8);
	msg.writeBigUInt64BE(BigInt(counter));
	const mac = createHmac("sha1", key).update(msg).digest();
	const offset = mac[mac.length - 1] & 0x0f;
	const bin = mac.readUInt32BE(offset) & 0x7fffffff;
	return String(bin % 10 ** DIGITS).padStart(DIGITS, "0");
}

/** The code for `timeMs`; throws RangeError on a malformed secret, period or time (programmer error). */
export function totp(secretHex: string, timeMs: number, period = 30): string {
	if (typeof secretHex !== "string" || !HEX.test(secretHex)) throw new RangeError("invalid totp secret");
	if (!validPeriod(period)) throw new RangeError("invalid totp period");
	if (!Number.isFinite(timeMs) || timeMs < 0) throw new RangeError("invalid totp time");
	return hotp(Buffer.from(secretHex, "hex"), Math.floor(timeMs / 1000 / period));
}

/**
 * Accepts the codes of the current counter ± `window` periods (clock drift). Every candidate is
 * compared in constant time and without early exit. Anything malformed, including out-of-range
 * options, is simply "not valid": this never throws.
 */
export function checkTotp(secretHex: string, code: string, opts: { period?: number; window?: number; now?: number } = {}): boolean {
	const { period = 30, window = 1, now = Date.now() } = opts;
	if (typeof secretHex !== "string" || !HEX.test(secretHex)) return false;
	if (typeof code !== "string" || !CODE.test(code)) return false;
	if (!validPeriod(period) || !validWindow(window) || !Number.isFinite(now) || now < 0) return false;
	const key = Buffer.from(secretHex, "hex");
	const given = Buffer.from(code, "ascii");
	const current = Math.floor(now / 1000 / period);
	let ok = false;
	for (let c = current - window; c <= current + window; c++) {
		if (c < 0) continue;
		if (timingSafeEqual(Buffer.from(hotp(key, c), "ascii"), given)) ok = true;
	}
	return ok;
}
