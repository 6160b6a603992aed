"""Support code shared by the test modules (artifact locator, fakes). Not collected as tests."""
