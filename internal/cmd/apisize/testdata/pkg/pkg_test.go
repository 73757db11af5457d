package pkg

func TestOnly() {}
