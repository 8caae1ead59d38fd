// A Strategy grown past its core (tools/check_strategy_core.py must refuse it): eleven
// virtuals with the destructor, one of them a capability's job.
class Strategy {
 public:
  virtual ~Strategy();
  virtual void prepare();
  virtual void train_step();
  virtual void eval_step();
  virtual void checkpoint_plan() const;
  virtual void capabilities();
  virtual bool keeps_server_copies() const { return false; }  // belongs in a capability

 protected:
  virtual void forward_backward();
  virtual void exchange_gradients() {}
  virtual void stepped_optimizer();
  virtual void apply_update();
};
