/**
 * Positions of live cursors (the `id:` of `event: live` and `event: change` frames, sent back as `Last-Event-ID`).
 *
 * A position names a place in the outbox for one stream: `base`, the record the stream's catch-up counts from, and
 * `upto`, the last change already sent of that catch-up (equal to `base` outside one; see live-cursor.ts, catchUp). It
 * travels sealed: `L` + base64url(AES-256 of the 16 bytes base ‖ upto, then a 12-byte tag of that block under the
 * stream's key), 39 characters.
 * - The outbox's counter is shared by every tenant: encrypted, it shows nobody else's write volume (one AES block, no
 *   nonce: equal positions of one deployment seal alike, which tells a holder nothing it does not already know).
 * - The stream's key is an HMAC of its identity (streamOf: principal, collection, zones, query, projection), so a
 *   position opens only for the stream it was given to: another principal's, another collection's or view's, or a
 *   made-up one is refused (96-bit tag, Positions.of).
 * - Both keys are derived from AES_SECRET for this purpose alone (HKDF, as lib/crypto.ts derives its purpose keys):
 *   every gateway of a deployment opens the positions of every other, also after a restart; a token refresh keeps the
 *   stream's identity (the principal, never the token).
 */
import { createCipheriv, createDecipheriv, createHmac, hkdfSync, timingSafeEqual, type Cipher, type Decipher } from "crypto";
import { parseJsonParam, parseZones } from "../../lib/query-safety";
import { identityOf, type TokenClaims } from "../../lib/types";

/** The HKDF `info` of the position keys. */
export const LIVE_POSITIONS = "platform/live-positions";
const TAG_BYTES = 12;
const SEALED = /^L[A-Za-z0-9_-]{38}$/;

/** Where a stream stands in the outbox: its catch-up's start, and the last change of it already sent. */
export interface Position {
	base: number;
	upto: number;
}

/**
 * The identity of a live stream: the principal (identity and client of the token, not the token), the collection
 * (`service.collection`) and the parameters that make its view (zones, `query`, `projection`, the soft-delete
 * header), in canonical form (object keys sorted, zones sorted), so the same view spelled otherwise is the same stream.
 */
export function streamOf(token: Pick<TokenClaims, "uid" | "aid" | "cid">, topic: string, query: Record<string, unknown>, headers: Record<string, string | undefined>): string {
	const json = (name: string, raw: unknown) => canonical(parseJsonParam(name, raw) ?? null);
	const zones = parseZones(query.zone ?? headers["x-zone"]).sort();
	return JSON.stringify([
		identityOf(token) ?? "",
		token.cid ?? "",
		topic,
		zones,
		json("query", query.query),
		json("projection", query.projection),
		headers["x-exclude-soft-delete-query"] !== undefined,
	]);
}

/** JSON text with every object's keys in order. */
function canonical(v: unknown): string {
	if (Array.isArray(v)) return `[${v.map(canonical).join(",")}]`;
	if (v && typeof v === "object")
		return `{${Object.keys(v)
			.sort()
			.map((k) => `${JSON.stringify(k)}:${canonical((v as Record<string, unknown>)[k])}`)
			.join(",")}}`;
	return JSON.stringify(v) ?? "null";
}

/** The positions of one stream. */
export interface StreamPositions {
	seal(base: number, upto?: number): string;
	/** The position `text` seals for this stream; undefined for anything else. */
	open(text: string): Position | undefined;
}

/** Seals and opens positions with the deployment's keys. */
export class Positions {
	/** Used block by block (`update` only, never `final`): one AES block in, one out, no padding. */
	private readonly enc: Cipher;
	private readonly dec: Decipher;
	private readonly mac: Buffer;

	constructor(secret: string) {
		const keys = Buffer.from(hkdfSync("sha256", Buffer.from(secret, "utf8"), Buffer.alloc(0), Buffer.from(LIVE_POSITIONS, "utf8"), 64));
		this.enc = createCipheriv("aes-256-ecb", keys.subarray(0, 32), null).setAutoPadding(false);
		this.dec = createDecipheriv("aes-256-ecb", keys.subarray(0, 32), null).setAutoPadding(false);
		this.mac = keys.subarray(32);
	}

	/**
	 * The positions of the stream `stream` (see streamOf). Its tag is AES-256 of the sealed block under a key of the
	 * stream's own (an HMAC of its identity), cut to 12 bytes: a block cipher on a single block is a pseudo-random
	 * function, hence a MAC of fixed-length messages, and one AES block costs a fraction of an HMAC per frame.
	 */
	of(stream: string): StreamPositions {
		const tagger = createCipheriv("aes-256-ecb", createHmac("sha256", this.mac).update(stream, "utf8").digest(), null).setAutoPadding(false);
		const tag = (sealed: Buffer) => tagger.update(sealed).subarray(0, TAG_BYTES);
		return {
			seal: (base, upto = base) => {
				const block = Buffer.allocUnsafe(16);
				block.writeBigUInt64BE(BigInt(base), 0);
				block.writeBigUInt64BE(BigInt(upto), 8);
				const sealed = this.enc.update(block);
				return `L${Buffer.concat([sealed, tag(sealed)]).toString("base64url")}`;
			},
			open: (text) => {
				if (!SEALED.test(text)) return undefined;
				const raw = Buffer.from(text.slice(1), "base64url");
				// One spelling per position: other values of the last character's unused bits are not the same position.
				if (raw.toString("base64url") !== text.slice(1)) return undefined;
				const sealed = raw.subarray(0, 16);
				if (!timingSafeEqual(raw.subarray(16), tag(sealed))) return undefined;
				const block = this.dec.update(sealed);
				const base = Number(block.readBigUInt64BE(0));
				const upto = Number(block.readBigUInt64BE(8));
				return Number.isSafeInteger(upto) && base <= upto ? { base, upto } : undefined;
			},
		};
	}
}
