/** IP allow lists: exact addresses and CIDR ranges of IPv4 and IPv6, matched through net.BlockList. */
import { BlockList, isIP } from "net";
import { badRequest } from "./errors";

// Decimal without leading zeros or signs, so "/08" or "/+8" are not silently accepted.
const PREFIX = /^(?:0|[1-9]\d{0,2})$/;
const MAPPED = /^(?:::|(?:0{1,4}:){5})ffff:(.+)$/i;
const MAPPED_HEX = /^([0-9a-f]{1,4}):([0-9a-f]{1,4})$/i;

/**
 * The plain form of a caller address: zone id dropped (`fe80::1%eth0`) and IPv4-mapped IPv6
 * (`::ffff:127.0.0.1`, `::ffff:7f00:1`) turned back into IPv4, as sockets on dual-stack hosts report it.
 */
export function normalizeIp(ip: string): string {
	let s = String(ip).trim();
	const zone = s.indexOf("%");
	if (zone >= 0) s = s.slice(0, zone);
	const m = MAPPED.exec(s);
	if (!m) return s;
	if (isIP(m[1]) === 4) return m[1];
	const hex = MAPPED_HEX.exec(m[1]);
	if (!hex) return s;
	const hi = parseInt(hex[1], 16);
	const lo = parseInt(hex[2], 16);
	return `${hi >> 8}.${hi & 0xff}.${lo >> 8}.${lo & 0xff}`;
}

/** Parses an entry; zone ids are refused since callers are compared without them. */
function parseEntry(s: string): { address: string; family: 4 | 6; prefix?: number } | null {
	if (typeof s !== "string" || s.includes("%")) return null;
	const slash = s.indexOf("/");
	const address = slash < 0 ? s : s.slice(0, slash);
	const family = isIP(address);
	if (family !== 4 && family !== 6) return null;
	if (slash < 0) return { address, family };
	const raw = s.slice(slash + 1);
	if (!PREFIX.test(raw)) return null;
	const prefix = Number(raw);
	return prefix <= (family === 4 ? 32 : 128) ? { address, family, prefix } : null;
}

/** An IPv4 or IPv6 address, or a CIDR of either with a prefix length valid for its family. */
export function isIpOrCidr(s: string): boolean {
	return parseEntry(s) !== null;
}

export class IpAllowList {
	readonly empty: boolean;
	private readonly list = new BlockList();

	/** Throws ApiError 400 naming the first invalid entry. */
	constructor(entries: string[]) {
		for (const entry of entries) {
			const e = parseEntry(entry);
			if (!e) throw badRequest(`invalid ip or cidr ${entry}`);
			const type = e.family === 4 ? "ipv4" : "ipv6";
			if (e.prefix === undefined) this.list.addAddress(e.address, type);
			else this.list.addSubnet(e.address, e.prefix, type);
		}
		this.empty = entries.length === 0;
	}

	/**
	 * Whether the caller is listed. A mapped caller is normalized to IPv4 (matches IPv4 entries) and an
	 * IPv4 caller is also tried in its mapped form (matches `::ffff:` entries), without relying on
	 * BlockList doing that mapping itself. An invalid address is never listed.
	 */
	has(ip: string): boolean {
		if (typeof ip !== "string") return false;
		const addr = normalizeIp(ip);
		const family = isIP(addr);
		if (family === 6) return this.list.check(addr, "ipv6");
		if (family !== 4) return false;
		return this.list.check(addr, "ipv4") || this.list.check(`::ffff:${addr}`, "ipv6");
	}
}

/** The eight groups of an IPv6 address (a trailing dotted IPv4 as two), or undefined when it is not one. */
export function expandIpv6(ip: string): number[] | undefined {
	let s = ip;
	// A trailing dotted IPv4 (::ffff:1.2.3.4 style) becomes two groups.
	const dotted = /(\d+\.\d+\.\d+\.\d+)$/.exec(s);
	if (dotted) {
		const [a, b, c, d] = dotted[1].split(".").map(Number);
		s = s.slice(0, -dotted[1].length) + `${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
	}
	const halves = s.split("::");
	if (halves.length > 2) return undefined;
	const head = halves[0] ? halves[0].split(":") : [];
	const tail = halves.length === 2 && halves[1] ? halves[1].split(":") : [];
	const fill = halves.length === 2 ? 8 - head.length - tail.length : 0;
	const all = [...head, ...Array(Math.max(fill, 0)).fill("0"), ...tail];
	if (all.length !== 8) return undefined;
	return all.map((g) => parseInt(g, 16));
}
