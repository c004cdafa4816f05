import { ApiError } from "../../lib/errors";
import { IpAllowList, isIpOrCidr, normalizeIp } from "../../lib/cidr";

describe("isIpOrCidr", () => {
	it.each(["127.0.0.1", "10.0.0.0/8", "0.0.0.0/0", "192.168.1.1/32", "::1", "2001:db8::/32", "::/0", "fe80::1/128", "::ffff:127.0.0.1", "::ffff:10.0.0.0/104"])("accepts %s", (s) =>
		expect(isIpOrCidr(s)).toBe(true),
	);

	it.each([
		"",
		"localhost",
		"256.0.0.1",
		"1.2.3",
		"10.0.0.0/33",
		"10.0.0.0/",
		"10.0.0.0/-1",
		"10.0.0.0/08",
		"10.0.0.0/+8",
		"10.0.0.0/8/8",
		"::1/129",
		"2001:db8::/x",
		" 1.2.3.4",
		"fe80::1%eth0",
		"1.2.3.4/8 ",
	])("rejects %p", (s) => expect(isIpOrCidr(s)).toBe(false));
});

describe("normalizeIp", () => {
	it("strips the IPv4 mapping and zone ids", () => {
		expect(normalizeIp("::ffff:127.0.0.1")).toBe("127.0.0.1");
		expect(normalizeIp("::FFFF:10.1.2.3")).toBe("10.1.2.3");
		expect(normalizeIp("0:0:0:0:0:ffff:10.1.2.3")).toBe("10.1.2.3");
		expect(normalizeIp("::ffff:7f00:1")).toBe("127.0.0.1");
		expect(normalizeIp("fe80::1%eth0")).toBe("fe80::1");
		expect(normalizeIp("1.2.3.4")).toBe("1.2.3.4");
		expect(normalizeIp("2001:db8::1")).toBe("2001:db8::1");
	});
});

describe("IpAllowList", () => {
	const list = new IpAllowList(["127.0.0.1", "10.0.0.0/8", "2001:db8::/32", "::1", "::ffff:192.168.5.5", "::ffff:172.16.0.0/108"]);

	it("matches IPv4 addresses and ranges", () => {
		expect(list.has("127.0.0.1")).toBe(true);
		expect(list.has("10.255.1.2")).toBe(true);
		expect(list.has("127.0.0.2")).toBe(false);
		expect(list.has("11.0.0.1")).toBe(false);
	});

	it("matches IPv6 addresses and ranges", () => {
		expect(list.has("::1")).toBe(true);
		expect(list.has("2001:db8:abcd::42")).toBe(true);
		expect(list.has("2001:db9::1")).toBe(false);
		expect(list.has("::2")).toBe(false);
	});

	it("matches IPv4-mapped callers against IPv4 entries", () => {
		expect(list.has("::ffff:127.0.0.1")).toBe(true);
		expect(list.has("::ffff:10.9.8.7")).toBe(true);
		expect(list.has("::ffff:7f00:1")).toBe(true);
		expect(list.has("::ffff:11.0.0.1")).toBe(false);
	});

	it("matches IPv4 callers against IPv4-mapped entries", () => {
		expect(list.has("192.168.5.5")).toBe(true);
		expect(list.has("::ffff:192.168.5.5")).toBe(true);
		expect(list.has("172.16.3.4")).toBe(true); // ::ffff:172.16.0.0/108 == 172.16.0.0/12
		expect(list.has("172.32.0.1")).toBe(false);
		expect(list.has("192.168.5.6")).toBe(false);
	});

	it("ignores zone ids of callers", () => {
		expect(new IpAllowList(["fe80::/10"]).has("fe80::1%eth0")).toBe(true);
	});

	it("never lists an invalid caller", () => {
		for (const ip of ["", "garbage", "999.1.1.1", "10.0.0.0/8", undefined, null]) {
			expect(list.has(ip as string)).toBe(false);
		}
	});

	it("reports emptiness and matches nothing when empty", () => {
		const empty = new IpAllowList([]);
		expect(empty.empty).toBe(true);
		expect(empty.has("127.0.0.1")).toBe(false);
		expect(list.empty).toBe(false);
	});

	it("rejects an invalid entry with a 400 naming it", () => {
		for (const bad of ["10.0.0.0/33", "not-an-ip", "::1/129"]) {
			let err: unknown;
			try {
				new IpAllowList(["127.0.0.1", bad]);
			} catch (e) {
				err = e;
			}
			expect(err).toBeInstanceOf(ApiError);
			expect((err as ApiError).code).toBe(400);
			expect((err as ApiError).message).toBe(`invalid ip or cidr ${bad}`);
		}
	});
});
