/** Pure rules of file content (docs/files.md): type sniffing, byte ranges, the download headers, share keys. */
import { createHash } from "crypto";

export const SHARE_TTL_DEFAULT = 3600;
export const SHARE_TTL_MAX = 30 * 24 * 3600;
/** Share keys a file keeps at most (the oldest go first; expired ones are dropped at every share). */
export const MAX_SHARE_KEYS = 50;
/** Bytes the sniffer looks at. */
export const SNIFF_BYTES = 512;

const SIGNATURES: Array<{ type: string; at?: number; bytes: number[] | string }> = [
	{ type: "image/png", bytes: [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a] },
	{ type: "image/jpeg", bytes: [0xff, 0xd8, 0xff] },
	{ type: "image/gif", bytes: "GIF87a" },
	{ type: "image/gif", bytes: "GIF89a" },
	{ type: "application/pdf", bytes: "%PDF-" },
	{ type: "application/zip", bytes: [0x50, 0x4b, 0x03, 0x04] },
	{ type: "application/gzip", bytes: [0x1f, 0x8b] },
	{ type: "audio/mpeg", bytes: "ID3" },
	{ type: "audio/ogg", bytes: "OggS" },
	{ type: "video/mp4", at: 4, bytes: "ftyp" },
];

function startsWith(head: Buffer, sig: number[] | string, at = 0): boolean {
	const b = typeof sig === "string" ? Buffer.from(sig, "latin1") : Buffer.from(sig);
	return head.length >= at + b.length && head.subarray(at, at + b.length).equals(b);
}

/** Declared types kept for content without a signature that reads as text. */
const TEXT_TYPES = new Set(["text/plain", "text/csv", "text/markdown", "application/json"]);

/**
 * The stored mimetype, from the first bytes, never from what the client declares alone: a known signature wins
 * (WebP and RIFF checked too); content without one is `text/plain` when it reads as UTF-8 text without NULs (or a
 * harmless declared text type: csv, markdown, json), otherwise `application/octet-stream`. HTML, SVG, XML or script
 * declared by a client are therefore served as plain text or bytes, never as active content.
 */
export function sniffMimetype(head: Buffer, declared?: string): string {
	for (const s of SIGNATURES) if (startsWith(head, s.bytes, s.at)) return s.type;
	if (startsWith(head, "RIFF") && startsWith(head, "WEBP", 8)) return "image/webp";
	if (!head.length) return "application/octet-stream";
	if (head.includes(0)) return "application/octet-stream";
	// A multi-byte character cut at the sniff boundary is not a reason to call the content binary.
	const text = new TextDecoder("utf-8", { fatal: false }).decode(head.subarray(0, Math.max(0, head.length - 3)));
	if (text.includes("\uFFFD")) return "application/octet-stream";
	const d = (declared ?? "").split(";")[0].trim().toLowerCase();
	return TEXT_TYPES.has(d) ? d : "text/plain";
}

/** Types a browser may show in place (anything else downloads as an attachment). */
const INLINE = new Set(["image/png", "image/jpeg", "image/gif", "image/webp", "application/pdf", "text/plain", "audio/mpeg", "audio/ogg", "video/mp4"]);

/** Content-Type of a download: text types carry their charset. */
export function contentType(mimetype: string): string {
	return mimetype.startsWith("text/") || mimetype === "application/json" ? `${mimetype}; charset=utf-8` : mimetype;
}

/**
 * Content-Disposition (RFC 6266 with the RFC 5987 `filename*`): an ASCII fallback without quotes, backslashes or
 * controls, and the exact name percent-encoded in UTF-8.
 */
export function contentDisposition(name: string, mimetype: string): string {
	const type = INLINE.has(mimetype) ? "inline" : "attachment";
	const clean = name.replace(/[\u0000-\u001f\u007f]/g, "").trim() || "file";
	const ascii = clean
		.replace(/[^\x20-\x7e]/g, "_")
		.replace(/["\\]/g, "_")
		.replace(/[%]/g, "_");
	const encoded = encodeURIComponent(clean).replace(/['()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
	return `${type}; filename="${ascii}"; filename*=UTF-8''${encoded}`;
}

export type RangeAnswer = { kind: "full" } | { kind: "partial"; start: number; end: number } | { kind: "unsatisfiable" };

/**
 * One `bytes=` range of RFC 9110 (`a-b`, `a-`, `-n`). Several ranges, other units or a malformed header are
 * ignored (the whole content, as the RFC allows); a range that starts past the end is unsatisfiable (416).
 */
export function parseRange(header: string | undefined, size: number): RangeAnswer {
	if (!header) return { kind: "full" };
	const m = /^\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*$/i.exec(header);
	if (!m || (m[1] === "" && m[2] === "")) return { kind: "full" };
	if (m[1] === "") {
		const n = Number(m[2]);
		if (n === 0 || size === 0) return { kind: "unsatisfiable" };
		return { kind: "partial", start: Math.max(0, size - n), end: size - 1 };
	}
	const start = Number(m[1]);
	const end = m[2] === "" ? size - 1 : Math.min(Number(m[2]), size - 1);
	if (!Number.isSafeInteger(start) || start >= size) return { kind: "unsatisfiable" };
	if (end < start) return { kind: "full" };
	return { kind: "partial", start, end };
}

export function hashShareKey(key: string): string {
	return createHash("sha256").update(key).digest("hex");
}

export function downloadPath(id: string, key?: string): string {
	return `/special/files/${id}/download${key ? `?key=${key}` : ""}`;
}
