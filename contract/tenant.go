package contract

// AnonymousTenant is the tenant of every request when no tenants are
// configured, and of a request that names none. It is the tenant label of
// such requests in metrics and the name under which a spend budget can be
// given to them.
const AnonymousTenant = "anonymous"
