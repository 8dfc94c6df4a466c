package mirror

// Classify is classify, for the tests of package mirror_test that make
// real errors with the registry helpers.
var Classify = classify
