/**
 * The address guard's refusal (finding 22): what a client may read (`message`, kept in delivery records, push-histories,
 * SMS records and configs) names the host and the category of the address, never the address a name resolved to;
 * the address is in `detail`, for the server log only.
 */
import { AddressRefused, nonPublicCategory, resolveTarget } from "../../runtime/address-guard";

const resolver = (map: Record<string, string[]>) => async (host: string) => (map[host] ?? []).map((address) => ({ address, family: address.includes(":") ? 6 : 4 }));
const r = resolver({
	"db.internal": ["10.0.0.5"],
	"metadata.internal": ["169.254.169.254"],
	"mixed.example": ["93.184.216.34", "192.168.1.7"],
	localhost: ["127.0.0.1", "::1"],
	"v6.internal": ["fd12:3456::9"],
	"mapped.internal": ["::ffff:10.9.8.7"],
	"mcast.internal": ["239.1.2.3"],
	"doc.internal": ["198.51.100.77"],
});

test.each([
	["http://db.internal/hook", "db.internal", "private", "10.0.0.5"],
	["http://metadata.internal/latest", "metadata.internal", "link-local", "169.254.169.254"],
	["https://mixed.example/x", "mixed.example", "private", "192.168.1.7"],
	["http://localhost:8080/", "localhost", "loopback", "127.0.0.1"],
	["http://v6.internal/", "v6.internal", "private", "fd12:3456::9"],
	["http://mapped.internal/", "mapped.internal", "private", "::ffff:10.9.8.7"],
	["http://mcast.internal/", "mcast.internal", "multicast", "239.1.2.3"],
	["http://doc.internal/", "doc.internal", "reserved", "198.51.100.77"],
])("%s: the message says not allowed (%s) without the address; the detail has it", async (url, host, category, address) => {
	const err = await resolveTarget(url, false, r).catch((e) => e);
	expect(err).toBeInstanceOf(AddressRefused);
	expect(err.message).toBe(`webhook host ${host} is not allowed: not a public address (${category})`);
	expect(err.message).not.toContain(address);
	expect(err.detail).toContain(`resolves to ${address}`);
});

test("a literal address names only what the caller wrote", async () => {
	const err = await resolveTarget("http://10.1.2.3:9/", false, r).catch((e) => e);
	expect(err.message).toBe("webhook host 10.1.2.3 is not allowed: not a public address (private)");
});

test("categories", () => {
	expect(nonPublicCategory("8.8.8.8")).toBeNull();
	expect(nonPublicCategory("2606:4700:4700::1111")).toBeNull();
	expect(nonPublicCategory("127.0.0.1")).toBe("loopback");
	expect(nonPublicCategory("::1")).toBe("loopback");
	expect(nonPublicCategory("::ffff:7f00:1")).toBe("loopback");
	expect(nonPublicCategory("2002:a9fe:a9fe::1")).toBe("link-local");
	expect(nonPublicCategory("100.64.0.1")).toBe("private");
	expect(nonPublicCategory("0.0.0.0")).toBe("reserved");
	expect(nonPublicCategory("not an ip")).toBe("reserved");
});
