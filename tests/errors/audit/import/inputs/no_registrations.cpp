// Nothing registered for an autocast key (no torch headers, so the case stays fast).
int add(int a, int b) { return a + b; }
