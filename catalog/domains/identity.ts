import type { DomainDef } from "../types";

export const identity: DomainDef = {
	name: "identity",
	restPort: 3080,
	grpcPort: 5080,
	description: "Users, profiles and sessions",
	collections: [
		{
			name: "users",
			description: "Users; one of username, email or phone is required",
			fields: {
				username: { type: "string", maxLength: 100 },
				email: { type: "string", format: "email", maxLength: 320 },
				phone: { type: "string", format: "e164" },
				password: { type: "string", writeOnly: true, maxLength: 200 },
				subjects: { type: "array", items: "string", description: "Role entries such as @editor and group names, without domain suffix" },
				status: { type: "string", enum: ["ACTIVE", "INACTIVE"] },
			},
			rules: [{ anyOf: ["username", "email", "phone"], message: "one of username, email or phone is required" }],
		},
		{
			name: "profiles",
			description: "User profiles",
			fields: {
				user: { type: "string", format: "objectId", relation: "identity/users" },
				first_name: { type: "string", maxLength: 200 },
				last_name: { type: "string", maxLength: 200 },
				avatar: { type: "string", format: "objectId", fileRef: true },
			},
		},
		{
			name: "sessions",
			description: "Login sessions",
			fields: {
				ip: { type: "string" },
				agent: { type: "string", maxLength: 1000 },
				expiration: { type: "date" },
				uid: { type: "string" },
				cid: { type: "string" },
				aid: { type: "string" },
				domain: { type: "string" },
				refresh: { type: "string", internal: true, description: "Hash of the current refresh token id" },
			},
		},
	],
};
