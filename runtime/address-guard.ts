/**
 * Outbound address guard (SSRF): a webhook URL may only reach public unicast addresses. Loopback, private
 * (10/8, 172.16/12, 192.168/16, fc00::/7), link-local (169.254/16, fe80::/10), unspecified, carrier-grade NAT,
 * documentation, benchmarking, multicast and reserved ranges are refused, also when embedded in an IPv6 address:
 * IPv4-mapped (`::ffff:10.0.0.1`, `::ffff:7f00:1`), IPv4-translated (`::ffff:0:7f00:1`), IPv4-compatible
 * (`::7f00:1`), NAT64 (`64:ff9b::a00:1`), 6to4 (`2002:0a00:0001::`) or Teredo (`2001:0::/32`). The host is resolved once; every
 * address it resolves to must be public, and the caller connects to that address (pinned: no second lookup that a
 * rebinding DNS could answer differently).
 */
import { BlockList, isIP } from "net";
import { lookup } from "dns/promises";
import { expandIpv6, normalizeIp } from "../lib/cidr";

/** Why an address is not public, by category only: what a client may be told (the address itself stays in the log). */
export type AddressCategory = "loopback" | "private" | "link-local" | "multicast" | "reserved";

const blocked: Record<AddressCategory, BlockList> = {
	loopback: new BlockList(),
	private: new BlockList(),
	"link-local": new BlockList(),
	multicast: new BlockList(),
	reserved: new BlockList(),
};
for (const [net, prefix, category] of [
	["0.0.0.0", 8, "reserved"], // "this network", unspecified
	["10.0.0.0", 8, "private"],
	["100.64.0.0", 10, "private"], // carrier-grade NAT
	["127.0.0.0", 8, "loopback"],
	["169.254.0.0", 16, "link-local"], // (cloud metadata)
	["172.16.0.0", 12, "private"],
	["192.0.0.0", 24, "reserved"], // IETF protocol assignments
	["192.0.2.0", 24, "reserved"], // documentation
	["192.88.99.0", 24, "reserved"], // 6to4 relay anycast
	["192.168.0.0", 16, "private"],
	["198.18.0.0", 15, "reserved"], // benchmarking
	["198.51.100.0", 24, "reserved"], // documentation
	["203.0.113.0", 24, "reserved"], // documentation
	["224.0.0.0", 4, "multicast"],
	["240.0.0.0", 4, "reserved"], // reserved, broadcast
] as const)
	blocked[category].addSubnet(net, prefix, "ipv4");
for (const [net, prefix, category] of [
	["::", 128, "reserved"], // unspecified
	["::1", 128, "loopback"],
	["::", 96, "reserved"], // IPv4-compatible (deprecated)
	["100::", 64, "reserved"], // discard
	["64:ff9b:1::", 48, "reserved"], // local-use NAT64
	["2001:db8::", 32, "reserved"], // documentation
	["2001:10::", 28, "reserved"], // ORCHID
	["fc00::", 7, "private"], // unique local
	["fe80::", 10, "link-local"],
	["fec0::", 10, "private"], // site-local (deprecated)
	["ff00::", 8, "multicast"],
] as const)
	blocked[category].addSubnet(net, prefix, "ipv6");
const CATEGORIES = Object.keys(blocked) as AddressCategory[];

/**
 * The IPv4 addresses an IPv6 address embeds, written in any of its forms: IPv4-mapped (::ffff:0:0/96, any spelling,
 * e.g. `::ffff:7f00:1`), IPv4-translated (::ffff:0:0:0/96, `::ffff:0:7f00:1`), IPv4-compatible (::/96), NAT64
 * (64:ff9b::/96), 6to4 (2002::/16) and Teredo (2001::/32: the server and the inverted client address).
 */
function embeddedIpv4(ip6: string): string[] {
	const groups = expandIpv6(ip6);
	if (!groups || groups.some((g) => !Number.isInteger(g) || g < 0 || g > 0xffff)) return [];
	const v4 = (hi: number, lo: number) => `${hi >> 8}.${hi & 0xff}.${lo >> 8}.${lo & 0xff}`;
	const zero = (from: number, to: number) => groups.slice(from, to).every((g) => g === 0);
	const out: string[] = [];
	if (zero(0, 5) && (groups[5] === 0xffff || groups[5] === 0)) out.push(v4(groups[6], groups[7]));
	if (zero(0, 4) && groups[4] === 0xffff && groups[5] === 0) out.push(v4(groups[6], groups[7]));
	if (groups[0] === 0x64 && groups[1] === 0xff9b && zero(2, 6)) out.push(v4(groups[6], groups[7]));
	if (groups[0] === 0x2002) out.push(v4(groups[1], groups[2]));
	if (groups[0] === 0x2001 && groups[1] === 0) out.push(v4(groups[2], groups[3]), v4(~groups[6] & 0xffff, ~groups[7] & 0xffff));
	return out;
}

/** The category of a non-public address (see the ranges above; anything not an IP is `reserved`); null for a public one. */
export function nonPublicCategory(address: string): AddressCategory | null {
	const ip = normalizeIp(address);
	const family = isIP(ip);
	if (family !== 4 && family !== 6) return "reserved";
	const type = family === 4 ? "ipv4" : "ipv6";
	const hit = CATEGORIES.find((c) => blocked[c].check(ip, type));
	if (hit || family === 4) return hit ?? null;
	// Every embedded IPv4 must be public too (a loopback or private one is refused whatever the IPv6 form).
	for (const v4 of embeddedIpv4(ip)) {
		const c = nonPublicCategory(v4);
		if (c) return c;
	}
	return null;
}

/** True for a public unicast address; false for every non-public range above and for anything not an IP. */
export function isPublicAddress(address: string): boolean {
	return nonPublicCategory(address) === null;
}

/**
 * A permanent refusal. `message` is what a client may read (kept in delivery records, push-histories, SMS records,
 * configs): it never says what a host name resolved to. `detail` is for the server log only.
 */
export class AddressRefused extends Error {
	readonly detail: string;
	constructor(message: string, detail = message) {
		super(message);
		this.name = "AddressRefused";
		this.detail = detail;
	}
}

export interface ResolvedTarget {
	url: URL;
	/** The address to connect to (pinned for the request). */
	address: string;
	family: 4 | 6;
}

export type Resolver = (host: string) => Promise<Array<{ address: string; family: number }>>;

const systemResolver: Resolver = (host) => lookup(host, { all: true, verbatim: true });

/**
 * Parses and resolves a webhook URL: http(s) only, no credentials in it; every resolved address must be public
 * unless `allowPrivate`. Throws AddressRefused (a permanent refusal) or the resolver's error (DNS failure: retryable).
 */
export async function resolveTarget(raw: unknown, allowPrivate: boolean, resolver: Resolver = systemResolver): Promise<ResolvedTarget> {
	if (typeof raw !== "string" || !raw) throw new AddressRefused("webhook is not a URL");
	let url: URL;
	try {
		url = new URL(raw);
	} catch {
		throw new AddressRefused("webhook is not a valid URL");
	}
	if (url.protocol !== "http:" && url.protocol !== "https:") throw new AddressRefused(`webhook scheme ${url.protocol} is not allowed (http or https)`);
	if (url.username || url.password) throw new AddressRefused("webhook URL must not carry credentials (use value.authorization)");
	const host = url.hostname.replace(/^\[(.*)\]$/, "$1");
	const literal = isIP(host);
	const addresses = literal ? [{ address: host, family: literal }] : await resolver(host);
	if (!addresses.length) throw new Error(`${host} does not resolve`);
	if (!allowPrivate) {
		for (const a of addresses) {
			const category = nonPublicCategory(a.address);
			if (category)
				throw new AddressRefused(
					`webhook host ${host} is not allowed: not a public address (${category})`,
					`webhook host ${host} resolves to ${a.address}, a ${category} address; set WEBHOOK_ALLOW_PRIVATE=1 to allow`,
				);
		}
	}
	const first = addresses[0];
	return { url, address: first.address, family: first.family === 6 ? 6 : 4 };
}
