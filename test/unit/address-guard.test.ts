import { AddressRefused, isPublicAddress, resolveTarget } from "../../runtime/address-guard";

describe("isPublicAddress", () => {
	test.each([
		"127.0.0.1",
		"127.255.255.254",
		"10.0.0.1",
		"10.255.255.255",
		"192.168.0.1",
		"192.168.255.1",
		"172.16.0.1",
		"172.31.255.255",
		"169.254.169.254",
		"169.254.0.1",
		"0.0.0.0",
		"0.1.2.3",
		"100.64.0.1",
		"224.0.0.1",
		"255.255.255.255",
		"192.0.2.10",
		"198.18.0.1",
		"::",
		"::1",
		"fe80::1",
		"fe80::1%eth0",
		"febf::1",
		"fc00::1",
		"fd12:3456:789a::1",
		"ff02::1",
		"::ffff:127.0.0.1",
		"::ffff:10.0.0.1",
		"::ffff:7f00:1",
		"64:ff9b::a00:1",
		"64:ff9b::127.0.0.1",
		"2002:a00:1::1",
		"2001:db8::1",
		// Every IPv6 form embedding a loopback or private IPv4 (issue 9.9): IPv4-translated ::ffff:0:0:0/96,
		// IPv4-mapped in other spellings, IPv4-compatible ::/96, NAT64 64:ff9b::/96, 6to4 2002::/16, Teredo.
		"::ffff:0:7f00:1",
		"::ffff:0:127.0.0.1",
		"0:0:0:0:ffff:0:a00:1",
		"::ffff:0:c0a8:101",
		"0:0:0:0:0:ffff:7f00:1",
		"0000:0000:0000:0000:0000:ffff:0a00:0001",
		"::7f00:1",
		"::127.0.0.1",
		"::a00:1",
		"64:ff9b::7f00:1",
		"64:ff9b:0:0:0:0:c0a8:1",
		"2002:7f00:1::",
		"2002:c0a8:101::1",
		"2002:a9fe:a9fe::1",
		"2001:0:7f00:1::1",
		"2001:0:808:808:0:0:80ff:fffe",
		"not an ip",
		"",
	])("%s is not public", (ip) => {
		expect(isPublicAddress(ip)).toBe(false);
	});

	test.each([
		"8.8.8.8",
		"1.1.1.1",
		"93.184.216.34",
		"172.15.255.255",
		"172.32.0.1",
		"192.169.0.1",
		"11.0.0.1",
		"169.253.1.1",
		"2606:4700:4700::1111",
		"2001:4860:4860::8888",
		"::ffff:8.8.8.8",
		"64:ff9b::808:808",
		"2002:808:808::1",
		"::ffff:0:808:808",
		"2001:0:808:808:0:0:f7f7:f7f7",
	])("%s is public", (ip) => {
		expect(isPublicAddress(ip)).toBe(true);
	});
});

describe("resolveTarget", () => {
	const resolver = (map: Record<string, string[]>) => async (host: string) => (map[host] ?? []).map((address) => ({ address, family: address.includes(":") ? 6 : 4 }));

	test("refuses hosts resolving to private addresses, and literal private IPs", async () => {
		const r = resolver({ "internal.example": ["10.1.2.3"], "mixed.example": ["8.8.8.8", "192.168.1.1"], localhost: ["127.0.0.1", "::1"] });
		for (const url of [
			"http://internal.example/x",
			"http://mixed.example/x",
			"http://localhost:8080/",
			"http://127.0.0.1/",
			"http://[::1]:9000/",
			"http://[fe80::1]/",
			"https://169.254.169.254/latest/meta-data",
			"http://0.0.0.0:80/",
			"http://[::ffff:0:7f00:1]:3010/",
			"http://[2002:7f00:1::]/",
			"http://[64:ff9b::a9fe:a9fe]/",
		])
			await expect(resolveTarget(url, false, r)).rejects.toBeInstanceOf(AddressRefused);
	});

	test("allows public hosts and pins the resolved address", async () => {
		const r = resolver({ "hooks.example": ["93.184.216.34", "93.184.216.35"] });
		const t = await resolveTarget("https://hooks.example/cb?x=1", false, r);
		expect(t).toMatchObject({ address: "93.184.216.34", family: 4 });
		expect(t.url.href).toBe("https://hooks.example/cb?x=1");
	});

	test("WEBHOOK_ALLOW_PRIVATE lets private addresses through", async () => {
		await expect(resolveTarget("http://127.0.0.1:1234/hook", true)).resolves.toMatchObject({ address: "127.0.0.1" });
		await expect(resolveTarget("http://[::1]:1234/hook", true)).resolves.toMatchObject({ address: "::1", family: 6 });
	});

	test("refuses what is not an http(s) URL, and URLs with credentials", async () => {
		for (const url of [undefined, 42, "", "not a url", "ftp://8.8.8.8/", "file:///etc/passwd", "http://user:pw@8.8.8.8/"])
			await expect(resolveTarget(url, true)).rejects.toBeInstanceOf(AddressRefused);
	});

	test("a DNS failure is not a refusal (retryable)", async () => {
		const err = await resolveTarget("http://nowhere.invalid/", false, resolver({})).catch((e) => e);
		expect(err).toBeInstanceOf(Error);
		expect(err).not.toBeInstanceOf(AddressRefused);
	});
});
